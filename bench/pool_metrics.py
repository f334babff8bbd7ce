"""Cost of the extender's per-pool metrics (capacity, allocation, stranded) at scrape time.

`SchedulerState.refresh_metrics` computes them under the cache lock, so binds wait for it once
per scrape. This builds a cluster of NODES nodes of GPUS GPUs in POOLS pools, fills it with
shared pods of mixed shapes through the production placement code, and times
`PoolUsageMeter.figures` cold (first scrape after a new workload-mix epoch) and warm (the
next scrapes). Prints figures; not a test.

    nice python bench/pool_metrics.py [--nodes 1213] [--gpus 8] [--pools 4] [--fill 0.7] [--repeat 20]
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PlacementPolicy, PodRequest, PodUid
from tessera.model.contract import LABEL_POOL, LABEL_POOL_KIND
from tessera.scheduler.pool_usage import PoolUsageMeter

SHAPES = ((1, 250, 4096), (1, 500, 8192), (1, 1000, 16384), (1, 300, 2048), (2, 1000, None))


def _cluster(nodes: int, gpus: int, pools: int, fill: float, seed: int) -> Cluster:
    cluster = Cluster(policy=PlacementPolicy.FRAGMENTATION_AWARE)
    for n in range(nodes):
        labels = {LABEL_POOL: f"pool-{n % pools}", LABEL_POOL_KIND: "shared"}
        cluster.add_node(NodeState(f"n{n}", [GpuState(i, f"GPU-{n}-{i}", "A100-40GB", 40960) for i in range(gpus)], labels=labels))
    rng = random.Random(seed)
    capacity = nodes * gpus * 1000
    placed = 0
    i = 0
    while placed < fill * capacity and i < nodes * gpus * 8:
        count, milli, memory = rng.choice(SHAPES)
        pod = PodRequest(PodUid(f"p{i}"), (ContainerRequest("main", count, milli, memory),), namespace="default", name=f"p{i}")
        i += 1
        cluster.observe(pod)
        placement = cluster.schedule(pod)
        if placement is not None:
            cluster.reserve(pod, placement)
            placed += count * milli
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--fill", type=float, default=0.7)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    cluster = _cluster(args.nodes, args.gpus, args.pools, args.fill, args.seed)
    meter = PoolUsageMeter()
    started = time.perf_counter()
    figures = meter.figures(cluster)
    cold = time.perf_counter() - started
    warm = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        meter.figures(cluster)
        warm.append(time.perf_counter() - started)
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {args.nodes} nodes x {args.gpus} GPUs, {args.pools} pools")
    for (pool, kind), (capacity, allocated, stranded) in sorted(figures.items()):
        print(f"  {pool} ({kind}): capacity {capacity:.0f} GPUs, allocated {allocated:.2f}, stranded {stranded:.2f}")
    print(f"figures(): cold {cold * 1000:.1f} ms, warm p50 {statistics.median(warm) * 1000:.1f} ms, max {max(warm) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
