"""What one node costs the production scorer when a pod's shape is new to it, in-process.

    nice python bench/evaluation_cost.py [--nodes 1213] [--rounds 4] [--gc]

Fills N eight-GPU nodes (`bench/synthetic.py`) to 90 % of their GPUs with the openb default
trace through the extender's own binder (as `tessera scheduler serve --simulate-fill 0.9` does),
then asks `Cluster.evaluate_many` (what the extender's views call for nodes without an answer)
about every node for share pods, three ways each:

- fresh: a GPU share (2 %, 3 %, ... of a GPU, each used once) not probed before, so no cache
  layer has it for the nodes changed since the fill last scored them (nearly all);
- family: the same share with other CPU (the policy's memo per GPU request answers the
  fragmentation part; the score's final terms and the caches' bookkeeping still run);
- cached: the same pod again (per-node results).

Figures are CPU microseconds per feasible node (the rejected nodes' cost is included, divided
over the feasible ones), medians over `--rounds` x 5 shares. The cyclic garbage collector is off
while timing unless `--gc`: its pauses depend on everything else the process allocated, which
`bench/scale.py` and `bench/extender.py` measure over HTTP.
"""
from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import PODS_CSV, eight_gpu_nodes  # noqa: E402

from tessera.alloc import Evaluation, PodRequest, pod_request_from_k8s  # noqa: E402
from tessera.scheduler.service import ExtenderConfig, ExtenderService  # noqa: E402
from tessera.scheduler.simulate import ensure_pod, simulated_api, trace_pod_manifest  # noqa: E402
from tessera.scheduler.simulate_fill import cycle, fill, trace_arrivals  # noqa: E402
from tessera.scheduler.state import StateSettings  # noqa: E402

CPUS = [6000, 3000, 2000, 1500, 2500]  # CPU milli of the probe pods, in turn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of 5 fresh shares (default 4)")
    parser.add_argument("--gc", action="store_true", help="leave the cyclic garbage collector on while timing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        api = simulated_api(eight_gpu_nodes(args.nodes, Path(tmp)))
        service = ExtenderService(api, ExtenderConfig(state=StateSettings(track_host_resources=True)), pod_sink=lambda p: ensure_pod(api, p))
        arrivals = cycle(trace_arrivals(PODS_CSV, 42))
        started = time.perf_counter()
        filled = fill(api, service.state, service.binder, arrivals, 0.9)
        print(f"{args.nodes} nodes filled with {filled.bound} pods in {time.perf_counter() - started:.0f} s", flush=True)
        cluster = service.state.cluster
        names = list(cluster.nodes)
        template = trace_pod_manifest(next(arrivals), namespace="default")
        gc.collect()
        gc.freeze()
        if not args.gc:
            gc.disable()
        count = 0

        def pod(milli: int, cpu: int) -> PodRequest:
            nonlocal count
            count += 1
            manifest: dict[str, Any] = copy.deepcopy(template)
            manifest["metadata"].update(name=f"probe-{count}", uid=f"probe-{count}")
            manifest["spec"]["containers"][0]["resources"] = {
                "requests": {"cpu": f"{cpu}m", "memory": "2Gi"}, "limits": {"tessera.dev/gpu-core": str(milli // 10)}
            }
            return pod_request_from_k8s(manifest)

        figures: dict[str, list[float]] = {"fresh": [], "family": [], "cached": []}
        feasible_counts: list[int] = []
        for k in range(5 * args.rounds):
            share, cpu = 20 + 10 * k, CPUS[k % len(CPUS)]
            for kind, request in (("fresh", pod(share, cpu)), ("family", pod(share, cpu + 100))):
                t0 = time.process_time()
                answers = cluster.evaluate_many(request, names)
                spent = time.process_time() - t0
                feasible = sum(1 for a in answers.values() if isinstance(a, Evaluation)) or 1
                figures[kind].append(1e6 * spent / feasible)
                if kind == "fresh":
                    feasible_counts.append(feasible)
            t0 = time.process_time()
            cluster.evaluate_many(request, names)
            figures["cached"].append(1e6 * (time.process_time() - t0) / feasible)
        gc.enable()
        print(
            f"per feasible node, CPU us (median of {len(figures['fresh'])} shares, {statistics.median(feasible_counts):.0f} feasible of "
            f"{len(names)} nodes, collector {'on' if args.gc else 'off'}): "
            + ", ".join(f"{kind} {statistics.median(values):.1f}" for kind, values in figures.items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
