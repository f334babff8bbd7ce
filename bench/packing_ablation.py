"""Ablation of the fragmentation-aware policy's design choices on one openb trace.

    nice python bench/packing_ablation.py --seeds 42,43 --variants default,nohost,noreserve,previous
    nice python bench/packing_ablation.py --trace cpu300 --trace-dir CLUSTERDATA/cluster-trace-gpu-v2023/csv --seeds 42 --variants default,noreserve --workers 2
    nice python bench/packing_ablation.py --trace gpuspec05 --trace-dir CLUSTERDATA/cluster-trace-gpu-v2023/csv --seeds 42,1001 --variants default,before-dips,protect2,norefresh

Each variant is `FragAwareSettings` (or the mix source) changed in one place; prints the allocated %
of capacity at 90/95/100/130 % arrived per seed and the mean. See docs/scheduling.md.
"""
from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tessera.alloc import Cluster, PlacementPolicy, WorkloadMix, static_snapshot  # noqa: E402
from tessera.alloc.frag_policy import FragmentationAwarePolicy  # noqa: E402
from tessera.alloc.frag_settings import FragAwareSettings  # noqa: E402
from tessera.alloc.workload import MixSettings  # noqa: E402
from tessera.sim.replay import Order, ReplaySettings, arrival_order  # noqa: E402
from tessera.sim.trace import TracePod, load_nodes, load_pods  # noqa: E402

BASE = FragAwareSettings()
VARIANTS: dict[str, tuple[FragAwareSettings, bool]] = {  # name -> (settings, learn the mix online)
    "default": (BASE, True),
    "nohost": (replace(BASE, host_weight=0.0), True),  # without host stranding
    "host0.25": (replace(BASE, host_weight=0.25), True),
    "host1": (replace(BASE, host_weight=1.0), True),
    "noreserve": (replace(BASE, reserve_horizon_pods=0.0), True),  # without reservations
    "reserve1000": (replace(BASE, reserve_horizon_pods=1000.0), True),
    "reserve8000": (replace(BASE, reserve_horizon_pods=8000.0), True),
    "nomodel": (replace(BASE, model_weight=0.0), True),  # without model pressure
    "previous": (replace(BASE, host_weight=0.0, reserve_horizon_pods=0.0, model_weight=0.0), True),  # before 2026-11-26
    "static": (BASE, False),  # the whole trace's mix given up front, as in the paper
    "exact": (replace(BASE, sigmoid_bands=False, tolerance_milli=0.0), True),
    "lin25": (replace(BASE, sigmoid_bands=False, tolerance_milli=25.0), True),
    "lin50": (replace(BASE, sigmoid_bands=False, tolerance_milli=50.0), True),
    "scale50": (replace(BASE, band_scale=50.0), True),
    "scale200": (replace(BASE, band_scale=200.0), True),
    "podweight": (replace(BASE, multi_gpu_weighting=False), True),
    "nosize": (replace(BASE, node_size_preference=0), True),
    "inuse": (replace(BASE, prefer_in_use=True), True),
    "idle": (replace(BASE, prefer_fewer_idle=True), True),
    # the terms added for the 90-95 % dips (2026-11-26, docs/scheduling.md items 10-13)
    "noscarce": (replace(BASE, scarce_weight=0.0), True),
    "nocpureserve": (replace(BASE, reserve_cpu_only=False), True),  # CPU-only pods never held off reserved hosts
    "cpureserve-always": (replace(BASE, cpu_only_headroom=0.0), True),  # held off even when CPU is short (cpu300)
    "noprior": (replace(BASE, scarce_prior=False), True),
    "protect2": (replace(BASE, model_protect_factor=2.0), True),
    "protect8": (replace(BASE, model_protect_factor=8.0), True),
    "norefresh": (BASE, True),  # with MIX_VARIANTS below
    "nomultifloor": (BASE, True),  # rare 8-GPU shapes dropped from the mix, with MIX_VARIANTS below
    "multifloor-always": (replace(BASE, rare_multi_need_cpu=False), True),  # their guards held even when CPU is short
    "before-dips": (replace(BASE, scarce_weight=0.0, reserve_cpu_only=False, model_protect_factor=2.0), True),
}
MIX_VARIANTS: dict[str, MixSettings] = {  # name -> how the mix is learned, where not the default
    "norefresh": MixSettings(limited_refresh_ratio=0.0),
    "nomultifloor": MixSettings(min_weight_multi=None),
    "before-dips": MixSettings(limited_refresh_ratio=0.0, min_weight_multi=None),
}
MARKS = (90, 95, 100, 130)


def run(
    nodes_csv: Path, pods: list[TracePod], settings: FragAwareSettings, learn: bool, seed: int, mix: MixSettings | None = None
) -> dict[int, float]:
    nodes = load_nodes(nodes_csv)
    cluster = Cluster(nodes, mix=WorkloadMix(mix or MixSettings()))
    policy = FragmentationAwarePolicy(cluster.mix.snapshot() if learn else static_snapshot(p.request for p in pods), settings)
    ranking = sorted(n.name for n in nodes)
    random.Random(seed).shuffle(ranking)
    cluster.set_tie_ranking(ranking)
    cluster.install_policy(policy)
    capacity = cluster.usage().capacity_milli
    requested = allocated = 0
    marks = list(MARKS)
    out: dict[int, float] = {}
    for pod in arrival_order(pods, ReplaySettings(order=Order.SHUFFLE, inflate=1.3, seed=seed), capacity):
        while marks and (requested + pod.gpu_milli_total) * 100 > marks[0] * capacity:
            out[marks.pop(0)] = allocated * 100 / capacity
        if learn:
            cluster.mix.observe(pod)
            policy.use_mix(cluster.mix.snapshot())
        placement = cluster.schedule(pod, PlacementPolicy.FRAGMENTATION_AWARE)
        requested += pod.gpu_milli_total
        if placement is not None:
            cluster.reserve(pod, placement)
            allocated += pod.gpu_milli_total
    for m in marks:
        out[m] = allocated * 100 / capacity
    return out


def _job(args: tuple[str, str, str, int]) -> tuple[str, int, dict[int, float]]:
    trace_dir, trace, name, seed = args
    settings, learn = VARIANTS[name]
    pods = load_pods(Path(trace_dir) / f"openb_pod_list_{trace}.csv")
    return name, seed, run(Path(trace_dir) / "openb_node_list_gpu_node.csv", pods, settings, learn, seed, MIX_VARIANTS.get(name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default="default")
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--trace-dir", default=str(ROOT / "bench" / "traces" / "openb"), help="folder of openb CSVs (default: the ones shipped in bench/traces/openb)")
    parser.add_argument("--workers", type=int, default=1, help="replays run in this many processes (default 1)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    jobs = [(args.trace_dir, args.trace, name, seed) for name in names for seed in seeds]
    results: dict[str, list[dict[int, float]]] = {name: [] for name in names}
    with multiprocessing.Pool(max(args.workers, 1)) as pool:
        for name, seed, r in pool.imap(_job, jobs):
            results[name].append(r)
            print(f"{name:12s} seed {seed}: " + "  ".join(f"{m}%: {r[m]:.2f}" for m in MARKS), flush=True)
    for name, rs in results.items():
        print(f"{name:12s} mean   : " + "  ".join(f"{m}%: {sum(r[m] for r in rs) / len(rs):.2f}" for m in MARKS), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
