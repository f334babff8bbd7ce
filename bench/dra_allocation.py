"""DRA route: allocation latency of the simulator's kube-scheduler model, and the ResourceSlice size.

    nice python bench/dra_allocation.py                        # 1,000 and 5,000 nodes, 1,000 probe claims each
    nice python bench/dra_allocation.py --nodes 1000 --probes 300

Latency: N nodes of 8 GPUs (`cores` 100 each, 80 GiB), loaded to 90 % of their cores with claims of
the openb trace's share sizes, first fit in GPU order as the DRA allocator fills a node (each
asking memory in proportion, so memory never binds first), then
probe claims (the same sizes, one in ten a whole GPU), each placed, recorded and released again, so
every probe meets the loaded cluster and the node it touched is evaluated afresh by the next one.
Per probe, the time of one scheduling decision: filter + score over the nodes + the allocation on the
chosen node (`DraPlacer.place`), for route `dra` (the pool's node policy + first-fit devices) and
`dra-default` (kube-scheduler alone: adaptive node sampling, LeastAllocated + BalancedAllocation),
and for reference the device-plugin route's `Cluster.schedule`. CPU time of this process in
Python, not kube-scheduler's Go: it says what the model costs, and how it grows with the nodes.

Size: the ResourceSlice `tessera_node.dra.slices` builds for a node of 8 and of 16 GPUs (and the
128-device limit), as compact JSON, against the API server's limits (see `LIMITS`).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "node-agent"))

from tessera.alloc import (  # noqa: E402
    Cluster,
    ContainerPlacement,
    ContainerRequest,
    GpuGrant,
    GpuState,
    NodeState,
    Placement,
    PodRequest,
    PodUid,
)
from tessera.model.contract import NodeGpu  # noqa: E402
from tessera.model.pool_policy import PoolPolicy  # noqa: E402
from tessera.sim.dra_route import DraPlacer, Route  # noqa: E402
from tessera_node.dra.slices import slice_body, slice_spec  # noqa: E402

GPUS_PER_NODE = 8
GPU_MEMORY_MIB = 81920
LOAD = 0.9
SHARE_CORES = (11, 16, 22, 23, 32, 46, 47, 55, 59, 65, 81)  # openb default trace's share sizes, in cores
# kubernetes/kubernetes, read for this benchmark:
LIMITS = {
    "devices per slice": 128,  # staging/src/k8s.io/api/resource/v1/types.go ResourceSliceMaxDevices
    "devices per slice with taints, counters or list attributes": 64,  # ResourceSliceMaxDevicesWithAdvancedFeatures
    "attributes + capacities per device": 32,  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
    "API server request body, bytes": 3 * 1024 * 1024,  # staging/src/k8s.io/apiserver/pkg/server/config.go MaxRequestBodyBytes
    "etcd request, bytes (default --max-request-bytes)": 1536 * 1024,  # same file: "1.5MB is the default client request size"
}


def _claim(uid: str, cores: int) -> PodRequest:
    if cores >= 100:
        container = ContainerRequest("c", 1, 1000, GPU_MEMORY_MIB)
    else:
        container = ContainerRequest("c", 1, cores * 10, GPU_MEMORY_MIB * cores // 100)
    return PodRequest(PodUid(uid), (container,), 100, 256)


def loaded_cluster(nodes: int, rng: random.Random) -> Cluster:
    inventory = [
        NodeState(f"node-{n:05d}", [GpuState(i, f"GPU-{n}-{i}", "A100", GPU_MEMORY_MIB) for i in range(GPUS_PER_NODE)], 128000, 1 << 20)
        for n in range(nodes)
    ]
    cluster = Cluster(inventory)
    target = int(LOAD * GPUS_PER_NODE * 100)
    uid = 0
    for node in inventory:
        used = 0
        misses = 0
        while used < target and misses < 20:
            cores = min(rng.choice(SHARE_CORES), target - used)
            gpu = next((g for g in node.gpus if g.free_milli >= cores * 10), None)  # first fit, as DRA fills a node
            if gpu is None:
                misses += 1
                continue
            pod = _claim(f"fill-{uid}", cores)
            uid += 1
            c = pod.containers[0]
            cluster.reserve(pod, Placement(node.name, (ContainerPlacement("c", (GpuGrant(gpu.index, c.gpu_milli, c.gpu_memory_mib or 0),)),)))
            used += cores
    return cluster


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(nodes: int, probes: int, seed: int) -> None:
    """Each route on its own freshly loaded cluster (the same load for the same seed): no route
    finds the evaluation caches another one warmed."""
    for route in (Route.DRA, Route.DRA_DEFAULT, Route.DEVICE_PLUGIN):
        rng = random.Random(seed)
        started = time.process_time()
        cluster = loaded_cluster(nodes, rng)
        if route is Route.DRA:
            usage = cluster.usage()
            print(f"{nodes} nodes x {GPUS_PER_NODE} GPUs: loaded to {usage.allocated_milli * 100 / usage.capacity_milli:.1f} % of cores "
                  f"({len(cluster.allocated())} claims) in {time.process_time() - started:.1f} s CPU")
        ranking = sorted(cluster.nodes)
        rng.shuffle(ranking)
        cluster.set_tie_ranking(ranking)
        sizes = [100 if rng.random() < 0.1 else rng.choice(SHARE_CORES) for _ in range(probes)]
        placer = None if route is Route.DEVICE_PLUGIN else DraPlacer(cluster, route, ranking)
        times: list[float] = []
        failed = 0
        for i, cores in enumerate(sizes):
            pod = _claim(f"probe-{i}", cores)
            t0 = time.perf_counter()
            placement = cluster.schedule(pod) if placer is None else placer.place(pod)
            times.append((time.perf_counter() - t0) * 1000)
            if placement is None:
                failed += 1
                continue
            cluster.reserve(pod, placement)
            cluster.release(pod.uid)
        extra = f", {placer.fallbacks} fallbacks" if placer is not None and route is Route.DRA else ""
        print(f"  {route.value:<14} per claim: p50 {_percentile(times, 0.5):7.2f} ms  p99 {_percentile(times, 0.99):7.2f} ms  "
              f"mean {statistics.mean(times):6.2f} ms  max {max(times):7.1f} ms  ({probes} probes, {failed} unplaceable{extra})")


def slice_size() -> None:
    policy = PoolPolicy(sharing="fixed-share", online_offline=True)
    labels = {"tessera.dev/pool": "a100-shared-pool"}
    print("ResourceSlice of one node (tessera_node.dra.slices), compact JSON:")
    for count in (8, 16, 128):
        gpus = [NodeGpu(i, f"GPU-{i:08x}-7d3c-4f0a-9b1e-0123456789ab", "NVIDIA A100-SXM4-80GB", GPU_MEMORY_MIB) for i in range(count)]
        node = "ip-10-0-123-45.cluster.internal"
        body = slice_body(node, slice_spec(node, gpus, policy, labels, 1))
        size = len(json.dumps(body, separators=(",", ":")).encode())
        device = body["spec"]["devices"][0]
        fields = len(device["attributes"]) + len(device["capacity"])
        print(f"  {count:>3} GPUs: {size:>7,} bytes ({size / LIMITS['API server request body, bytes'] * 100:5.2f} % of the request body limit, "
              f"{size / LIMITS['etcd request, bytes (default --max-request-bytes)'] * 100:5.2f} % of etcd's), {count} devices "
              f"(limit {LIMITS['devices per slice']}), {fields} attributes + capacities per device (limit {LIMITS['attributes + capacities per device']})")
    print("limits: " + "; ".join(f"{k} {v:,}" for k, v in LIMITS.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1000,5000", help="comma-separated cluster sizes (default 1000,5000)")
    parser.add_argument("--probes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    slice_size()
    for nodes in (int(n) for n in args.nodes.split(",")):
        latency(nodes, args.probes, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
