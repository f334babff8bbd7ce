"""/preempt decision time for one call over many candidate nodes (prints figures; not a test).

kube-scheduler sends up to max(10 % of the nodes it could preempt on, 100) candidates in one
/preempt call, and the extender's `httpTimeout` covers the whole call. This builds an extender
cache of N nodes x G GPUs filled with random shares (priorities 0..3) by the production policy,
then times `Preemptor.preempt` for a share, a whole GPU and two whole GPUs of a pod of higher
priority, every node a candidate with two random victims proposed (no time budget, so every
node is examined):

    nice python bench/preempt.py [--nodes 100] [--gpus 8] [--pods-per-node 40] [--policy fragmentation-aware]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from collections.abc import Sequence

from tessera.alloc import Cluster, FitFailure, PlacementPolicy, pod_request_from_k8s
from tessera.model.contract import ANNOTATION_NODE_GPUS, GPU_CORE, LABEL_POOL_KIND, NodeGpu
from tessera.kube.api import KubeObject
from tessera.scheduler.extender_types import ExtenderPreemptionArgs, Victims
from tessera.scheduler.preemption import PreemptSettings, Preemptor
from tessera.scheduler.state import SchedulerState, StateSettings


def _node(name: str, gpus: int) -> KubeObject:
    inventory = [NodeGpu(i, f"GPU-{name}-{i}", "T4", 15360).to_json() for i in range(gpus)]
    return {"metadata": {"name": name, "labels": {LABEL_POOL_KIND: "shared"}, "annotations": {ANNOTATION_NODE_GPUS: json.dumps(inventory)}}}


def _pod(name: str, core: int, priority: int) -> KubeObject:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"priority": priority, "containers": [{"name": "main", "resources": {"limits": {GPU_CORE: str(core)}}}]},
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods-per-node", type=int, default=40, help="tried per node; those that fit stay")
    parser.add_argument("--policy", default="fragmentation-aware")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    state = SchedulerState(Cluster(policy=PlacementPolicy.parse(args.policy)), StateSettings(), clock=time.time)
    names = [f"n{i}" for i in range(args.nodes)]
    held: dict[str, list[str]] = {n: [] for n in names}
    for name in names:
        state.apply_node(_node(name, args.gpus))
        for i in range(args.pods_per_node):
            pod = _pod(f"{name}-p{i}", rng.choice([10, 20, 25, 30, 40, 50, 100]), rng.randint(0, 3))
            request = pod_request_from_k8s(pod)
            state.observe_once(request)
            if not isinstance(state.reserve_for_bind(request, name, priority=pod["spec"]["priority"]), FitFailure):
                state.finish_bind(request.uid, bound=True)
                held[name].append(request.uid)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{platform.node()} load {load:.1f}; {args.nodes} nodes x {args.gpus} GPUs, {sum(map(len, held.values())) / args.nodes:.1f} pods per node, policy {args.policy}")
    preemptor = Preemptor(state, PreemptSettings(time_budget_s=3600))
    for core in (50, 100, 200):
        call = ExtenderPreemptionArgs(_pod("urgent", core, 10), {n: Victims(tuple(rng.sample(held[n], 2)), 0) for n in names})
        started = time.perf_counter()
        result = preemptor.preempt(call)
        took = time.perf_counter() - started
        victims = sum(len(v.uids) for v in result.victims.values()) / max(1, len(result.victims))
        print(f"gpu-core {core:>3}: {took:6.2f} s for {args.nodes} nodes ({1000 * took / args.nodes:5.1f} ms/node), {len(result.victims)} kept, {victims:.2f} victims per node")


if __name__ == "__main__":
    main()
