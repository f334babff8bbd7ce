"""Packing on a dra pool against the device-plugin route: the FGD paper's experiment on the openb
default trace (`tessera sim replay --order shuffle --inflate 1.3 --seed S --route R`) per route.

    nice python bench/dra_packing.py                                   # routes device-plugin,dra,dra-default; seeds 42-51
    nice python bench/dra_packing.py --routes device-plugin,dra --seeds 42-46 --workers 2

Routes (`tessera.sim.dra_route`): `device-plugin` (Tessera's extender places node and GPUs),
`dra` (the pool's node policy picks the node, kube-scheduler's DRA allocator the devices, first
fit), `dra-default` (kube-scheduler alone). Prints, per route, the mean allocated % of capacity at
90/95/100/130 % arrived with the sample standard deviation and min..max across seeds, and per
seed against `device-plugin` the difference at 100 % with its mean, sd and paired t statistic.
CPU heavy (dra-default filters hundreds of nodes per pod: ~1 min per replay); run with `nice`.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tessera.alloc import DEFAULT_POLICY  # noqa: E402
from tessera.sim.dra_route import Route  # noqa: E402
from tessera.sim.replay import Order, ReplaySettings, replay  # noqa: E402
from tessera.sim.trace import load_nodes, load_pods  # noqa: E402

TRACES = ROOT / "bench" / "traces" / "openb"
LEVELS = (90.0, 95.0, 100.0, 130.0)


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _run(job: tuple[str, int]) -> tuple[str, int, dict[float, float], float]:
    route, seed = job
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    pods = load_pods(TRACES / "openb_pod_list_default.csv")
    started = time.process_time()
    result = replay(nodes, pods, ReplaySettings(DEFAULT_POLICY, Order.SHUFFLE, 1.3, seed, Route(route)))
    levels = {x: result.allocated_at(x) or 0.0 for x in LEVELS}
    return route, seed, levels, time.process_time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routes", default=",".join(r.value for r in Route))
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    routes = [Route(r.strip()).value for r in args.routes.split(",") if r.strip()]
    jobs = [(r, s) for r in routes for s in _seeds(args.seeds)]
    if args.workers > 1:
        with multiprocessing.Pool(args.workers) as pool:
            done = pool.map(_run, jobs, chunksize=1)
    else:
        done = [_run(j) for j in jobs]
    by_route: dict[str, dict[int, dict[float, float]]] = {}
    for route, seed, levels, cpu in done:
        by_route.setdefault(route, {})[seed] = levels
        print(f"{route} seed {seed}: " + ", ".join(f"{x:g}%: {y:.2f}" for x, y in levels.items()) + f"  ({cpu:.1f} s CPU)")
    print("\nallocated GPU % of capacity at arrived %: mean (sd, min..max) over seeds " + args.seeds)
    for route, runs in by_route.items():
        cells = []
        for x in LEVELS:
            ys = [runs[s][x] for s in sorted(runs)]
            sd = statistics.stdev(ys) if len(ys) > 1 else 0.0
            cells.append(f"{x:g}%: {statistics.mean(ys):.2f} ({sd:.2f}, {min(ys):.2f}..{max(ys):.2f})")
        print(f"  {route:<14} " + "  ".join(cells))
    base = by_route.get(Route.DEVICE_PLUGIN.value)
    if base:
        print("\nagainst device-plugin at 100 % arrived, paired by seed:")
        for route, runs in by_route.items():
            if route == Route.DEVICE_PLUGIN.value:
                continue
            diffs = [runs[s][100.0] - base[s][100.0] for s in sorted(runs) if s in base]
            if len(diffs) < 2:
                continue
            sd = statistics.stdev(diffs)
            t = statistics.mean(diffs) / (sd / math.sqrt(len(diffs))) if sd else math.inf
            print(f"  {route:<14} mean {statistics.mean(diffs):+.3f}, sd {sd:.3f}, t {t:.2f} ({len(diffs) - 1} df); per seed "
                  + " ".join(f"{d:+.2f}" for d in diffs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
