"""/preempt decision time, /preempt against victim-list size and against victims that must all
stay, and memory per /filter naming unknown nodes (prints figures; not a test).

Four measurements, each selected by its option:

- decision (the default): kube-scheduler sends up to max(10 % of the nodes it could preempt on,
  100) candidates in one /preempt call, and the extender's `httpTimeout` covers the whole call.
  This builds an extender cache of N nodes x G GPUs filled with random shares (priorities 0..3)
  by the production policy, then times `Preemptor.preempt` for a share, a whole GPU and two whole
  GPUs of a pod of higher priority, every node a candidate with two random victims proposed (no
  time budget, so every node is examined);
- `--victims 1000,10000,20000,100000`: an extender in this process (`ExtenderService` over the
  in-memory API server, on loopback HTTP) with nodes of 2 GPUs holding three bound pods each; per
  size, a /preempt whose victim lists add up to that many UIDs (kube-scheduler's own victim of the
  node plus pods holding no Tessera GPU), spread over `--spread` nodes (1,100 by default). Timed
  on the wire (request bytes out to reply bytes in, the body built beforehand) with the budget
  raised to an hour so that all the work is done, then the same work split in this process:
  JSON parsing, decoding, the decision, encoding the reply; and once more over HTTP with the
  default 2 s budget (how many nodes the answer keeps);
- `--must-stay 1000,10000,20000,100000`: the search's worst case, a node where every
  lower-priority pod must go: per size n, one node of n / 1,000 GPUs (at least one; or
  `--node-gpus`) packed with n bound pods of 1 milli-GPU each (finer than `tessera.dev/gpu-core`'s
  1 %: the allocation model takes it, and a GPU holds 1,000 of them), and a preemptor asking for
  every GPU of the node; kube-scheduler proposes all n pods. Timed in this process
  (`Preemptor.preempt`, the production policy, budget raised to an hour): kube-scheduler's
  reprieve asks about every pod (n fit checks), each set of victims differing from the one
  before by a pod or two. A fit check looks at every GPU of the node, so its cost grows with the
  node's GPUs; `--node-gpus` keeps them fixed across the sizes;
- `--unknown-names 100000 --requests 10`: /filter requests over loopback HTTP to an extender in
  this process, each naming that many nodes that do not exist (new names every time) and one
  that does; memory traced by tracemalloc after each (what the extender keeps), and VmRSS.

    nice python bench/preempt.py [--nodes 100] [--gpus 8] [--pods-per-node 40] [--policy fragmentation-aware]
    nice python bench/preempt.py --victims 1000,10000,20000,100000 [--spread 1,100]
    nice python bench/preempt.py --must-stay 1000,10000,20000,100000 [--node-gpus 10]
    nice python bench/preempt.py --unknown-names 100000 --requests 10
"""
from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import platform
import random
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

from tessera.alloc import Cluster, ContainerRequest, FitFailure, PlacementPolicy, PodRequest, PodUid, pod_request_from_k8s
from tessera.httpd import json_bytes, parse_json
from tessera.kube.api import KubeObject
from tessera.kube.fake import FakeKubeApi
from tessera.model.contract import ANNOTATION_NODE_GPUS, GPU_CORE, LABEL_GPU_PLACEMENT, LABEL_POOL_KIND, NodeGpu
from tessera.scheduler.extender_types import ExtenderPreemptionArgs, Victims
from tessera.scheduler.http_server import ServerSettings
from tessera.scheduler.preemption import PreemptSettings, Preemptor
from tessera.scheduler.service import ExtenderConfig, ExtenderService
from tessera.scheduler.state import SchedulerState, StateSettings


def _node(name: str, gpus: int, placement: str | None = None) -> KubeObject:
    inventory = [NodeGpu(i, f"GPU-{name}-{i}", "T4", 15360).to_json() for i in range(gpus)]
    labels = {LABEL_POOL_KIND: "shared", **({LABEL_GPU_PLACEMENT: placement} if placement else {})}
    return {"metadata": {"name": name, "labels": labels, "annotations": {ANNOTATION_NODE_GPUS: json.dumps(inventory)}}}


def _pod(name: str, core: int, priority: int) -> KubeObject:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"priority": priority, "containers": [{"name": "main", "resources": {"limits": {GPU_CORE: str(core)}}}]},
    }


def _machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.node()} ({os.cpu_count()} CPUs, Python {platform.python_version()}), load {load:.1f}"


def decision(args: argparse.Namespace) -> None:
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
    print(f"{_machine()}; {args.nodes} nodes x {args.gpus} GPUs, {sum(map(len, held.values())) / args.nodes:.1f} pods per node, policy {args.policy}")
    preemptor = Preemptor(state, PreemptSettings(time_budget_s=3600))
    for core in (50, 100, 200):
        call = ExtenderPreemptionArgs(_pod("urgent", core, 10), {n: Victims(tuple(rng.sample(held[n], 2)), 0) for n in names})
        started = time.perf_counter()
        result = preemptor.preempt(call)
        took = time.perf_counter() - started
        victims = sum(len(v.uids) for v in result.victims.values()) / max(1, len(result.victims))
        print(f"gpu-core {core:>3}: {took:6.2f} s for {args.nodes} nodes ({1000 * took / args.nodes:5.1f} ms/node), {len(result.victims)} kept, {victims:.2f} victims per node")


class _Wire:
    """`post` times request bytes out to reply bytes in, each on a new connection (the work
    between two requests may outlast the server's wait for a connection's first byte)."""

    def __init__(self, port: int) -> None:
        self._port = port

    def post(self, path: str, body: bytes) -> tuple[float, int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self._port, timeout=3600)
        try:
            conn.connect()
            started = time.perf_counter()
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
            return time.perf_counter() - started, response.status, data
        finally:
            conn.close()


def _extender(api: FakeKubeApi, budget_s: float) -> ExtenderService:
    config = ExtenderConfig(policy=PlacementPolicy.BINPACK, server=ServerSettings(host="127.0.0.1", port=0), preempt=PreemptSettings(time_budget_s=budget_s))
    service = ExtenderService(api, config)
    if not service.start(wait_ready_s=60):
        raise SystemExit("the extender's cache did not sync")
    return service


def victims(args: argparse.Namespace) -> None:
    """/preempt against the number of victims listed."""
    spreads = [int(s) for s in args.spread.split(",")]
    api = FakeKubeApi()
    for n in range(max(spreads)):
        api.create_node(_node(f"n{n}", 2, "binpack"))
    service = _extender(api, budget_s=3600)
    wire = _Wire(service.port)
    b30: dict[str, str] = {}
    for n in range(max(spreads)):  # a60 + b30 on one GPU, c70 on the other (binpack), priority 0
        for name, core in (("a60", 60), ("b30", 30), ("c70", 70)):
            pod = api.create_pod(_pod(f"{name}-{n}", core, 0))
            bind = {"PodName": pod["metadata"]["name"], "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": f"n{n}"}
            _, status, data = wire.post("/bind", json.dumps(bind).encode())
            if status != 200 or json.loads(data) != {"Error": ""}:
                raise SystemExit(f"bind {bind}: {status} {data[:200]!r}")
            if name == "b30":  # kube-scheduler's own victim there (it frees nothing usable)
                b30[f"n{n}"] = pod["metadata"]["uid"]
    urgent = api.create_pod(_pod("urgent", 50, 1000))
    short = _extender(api, budget_s=PreemptSettings().time_budget_s)
    short_wire = _Wire(short.port)
    extender = service.extender
    print(f"{_machine()}; nodes of 2 GPUs with 3 bound pods each, a 50 % preemptor of higher priority; budget 1 h (full work), then 2 s")
    print("victims | nodes | on the wire s | parse s | decode s | decide s | encode s | reply MB | 2 s budget: s, nodes kept")
    for size in (int(s) for s in args.victims.split(",")):
        for spread in spreads:
            per_node = size // spread
            meta = {
                f"n{n}": {"Pods": [{"UID": b30[f"n{n}"]}] + [{"UID": f"n{n}-cpu-pod-{i:07d}"} for i in range(per_node - 1)], "NumPDBViolations": 0}
                for n in range(spread)
            }
            body = json_bytes({"Pod": urgent, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta})
            wire_s, status, data = wire.post("/preempt", body)
            kept = len(json.loads(data)["NodeNameToMetaVictims"]) if status == 200 else -1
            started = time.perf_counter()
            parsed = parse_json(body)
            parsed_at = time.perf_counter()
            call = ExtenderPreemptionArgs.from_json(parsed)
            decoded_at = time.perf_counter()
            result = extender.preempt(call)
            decided_at = time.perf_counter()
            reply = json_bytes(result.to_json())
            encoded_at = time.perf_counter()
            short_s, short_status, short_data = short_wire.post("/preempt", body)
            short_kept = len(json.loads(short_data)["NodeNameToMetaVictims"]) if short_status == 200 else -1
            print(
                f"{size:>7,} | {spread:>5} | {wire_s:13.3f} | {parsed_at - started:7.3f} | {decoded_at - parsed_at:8.3f} | "
                f"{decided_at - decoded_at:8.3f} | {encoded_at - decided_at:8.3f} | {len(reply) / 1e6:8.2f} | {short_s:.3f}, {short_kept} of {spread}"
                + ("" if status == 200 and kept == spread else f"  (HTTP {status}, {kept} kept)")
            )
    short.stop()
    service.stop()


def must_stay(args: argparse.Namespace) -> None:
    """/preempt where every lower-priority pod of the node must go."""
    gpus_text = f"{args.node_gpus} GPUs" if args.node_gpus else "n / 1,000 GPUs"
    print(f"{_machine()}; one node of {gpus_text} packed with n bound pods of 1 milli-GPU, a preemptor of higher priority asking for every GPU; policy {args.policy}")
    print("pods n | GPUs | setup s | /preempt s | per pod us | fit checks | victims")
    for n in (int(s) for s in args.must_stay.split(",")):
        gpus = args.node_gpus or max(1, n // 1000)
        started = time.perf_counter()
        state = SchedulerState(Cluster(policy=PlacementPolicy.parse(args.policy)), StateSettings(), clock=time.time)
        state.apply_node(_node("n0", gpus))
        uids: list[str] = []
        for i in range(n):
            request = PodRequest(PodUid(f"low-{i:06d}"), (ContainerRequest("main", 1, 1),), name=f"low-{i:06d}")
            if isinstance(state.reserve_for_bind(request, "n0", priority=0), FitFailure):
                raise SystemExit(f"pod {i} of {n} did not fit")
            state.finish_bind(request.uid, bound=True)
            uids.append(request.uid)
        setup = time.perf_counter() - started
        checks = _CountingFits(state)
        call = ExtenderPreemptionArgs(_pod("urgent", 100 * gpus, 10), {"n0": Victims(tuple(uids), 0)})
        started = time.perf_counter()
        result = Preemptor(state, PreemptSettings(time_budget_s=3600)).preempt(call)
        took = time.perf_counter() - started
        victims = len(result.victims["n0"].uids) if "n0" in result.victims else 0
        print(f"{n:>7,} | {gpus:>4} | {setup:7.1f} | {took:10.3f} | {1e6 * took / n:10.1f} | {checks.count():>10,} | {victims:,}", flush=True)
        checks.close()


class _CountingFits:
    """Counts the fit checks of the node's evaluations (`Cluster.evaluate` calls), for the table."""

    def __init__(self, state: SchedulerState) -> None:
        self._cluster = state.cluster
        self._calls = 0
        self._evaluate = state.cluster.evaluate

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._calls += 1
            return self._evaluate(*args, **kwargs)

        self._cluster.evaluate = counted  # type: ignore[method-assign]

    def count(self) -> int:
        return self._calls

    def close(self) -> None:
        self._cluster.evaluate = self._evaluate  # type: ignore[method-assign]


def _rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def unknown_names(args: argparse.Namespace) -> None:
    """What a /filter naming nodes that do not exist leaves behind."""
    api = FakeKubeApi()
    api.create_node(_node("n1", 2))
    service = _extender(api, budget_s=PreemptSettings().time_budget_s)
    wire = _Wire(service.port)
    print(f"{_machine()}; {args.requests} /filter requests, each naming {args.unknown_names:,} nodes that do not exist (new names each time) and 1 that does")
    bodies = [
        json_bytes({"Pod": _pod(f"probe-{r % 3}", 50, 0), "NodeNames": [f"ghost-{r}-{i:07d}" for i in range(args.unknown_names)] + ["n1"]})
        for r in range(args.requests)
    ]
    gc.collect()
    tracemalloc.start()
    traced: list[float] = []
    for r in range(args.requests):
        took, status, data = wire.post("/filter", bodies[r])
        bodies[r] = b""
        if status != 200 or not data.startswith(b'{"Nodes":null,"NodeNames":["n1"]'):
            raise SystemExit(f"/filter: HTTP {status}: {data[:200]!r}")
        del data
        gc.collect()
        traced.append(tracemalloc.get_traced_memory()[0] / 2**20)
        print(f"request {r + 1:>3}: {took:6.2f} s (traced), traced memory {traced[-1]:8.2f} MiB, RSS {_rss_mib():7.0f} MiB")
    tracemalloc.stop()
    if len(traced) > 1:
        print(f"kept per request after the first: {1024 * (traced[-1] - traced[0]) / (len(traced) - 1):.1f} KiB")
    service.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods-per-node", type=int, default=40, help="tried per node; those that fit stay")
    parser.add_argument("--policy", default="fragmentation-aware")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--victims", help="victim-list sizes, comma-separated: /preempt against the number of victims listed")
    parser.add_argument("--spread", default="1,100", help="with --victims: over how many nodes the victims are listed")
    parser.add_argument("--must-stay", help="pod counts, comma-separated: /preempt on a node where every lower-priority pod must go")
    parser.add_argument("--node-gpus", type=int, default=0, help="with --must-stay: the node's GPUs (default n / 1,000, at least 1)")
    parser.add_argument("--unknown-names", type=int, help="/filter naming this many nodes that do not exist: memory kept per request")
    parser.add_argument("--requests", type=int, default=10, help="with --unknown-names: how many requests")
    args: Any = parser.parse_args(argv)
    if args.victims:
        victims(args)
    elif args.must_stay:
        must_stay(args)
    elif args.unknown_names:
        unknown_names(args)
    else:
        decision(args)


if __name__ == "__main__":
    main()
