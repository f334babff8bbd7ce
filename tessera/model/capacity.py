"""What a node of each pool advertises, and what one replica of a workload asks for, as extended resources.

One home for both, so that `tessera plan` (pool capacity, workload demand), the workload rules
(does the share fit, do quotas hold) and the workload manifests (the container's resource limits)
name exactly the resources the device plugins advertise:

| pool kind | node advertises                                     | a replica asks for                       |
| --------- | --------------------------------------------------- | ---------------------------------------- |
| shared    | tessera.dev/gpu-core 100/GPU, gpu-memory MiB/GPU    | gpu.core, gpu.memoryMiB                  |
| mig       | nvidia.com/mig-<profile> (cluster strategy mixed), | one slice of gpu.migProfile              |
|           | nvidia.com/gpu (single); x time-slicing replicas   |                                          |
| nvidia    | nvidia.com/gpu per GPU                              | gpu.gpus                                 |
| timeslice | nvidia.com/gpu x replicas per GPU                   | gpu.gpus replicas                        |

With `timeSlicing.renameByDefault` NVIDIA's device plugin advertises a time-sliced resource as
`<name>.shared` (NVIDIA/k8s-device-plugin, api/config/v1: `ResourceName.DefaultSharedRename`; only
resources listed with replicas, which Tessera does for replicas > 1), so both columns use that name.
"""
from __future__ import annotations

from collections.abc import Iterable

from tessera.model.contract import CORE_PER_GPU, DRA_DRIVER, GPU_CORE, GPU_MEMORY, NVIDIA_GPU
from tessera.model.mig import MigStrategy, cluster_mig_strategy, mig_replicas, mig_resources, resolve_layout
from tessera.model.pools import MigPool, PoolBase, SharedPool, TimeSlicingConfig, TimeslicePool
from tessera.model.workloads import WorkloadGpu

SHARED_SUFFIX = ".shared"


def pools_mig_strategy(pools: Iterable[PoolBase]) -> MigStrategy:
    """gpu-operator's one MIG strategy for these pools (`mixed` when any mig pool is mixed)."""
    return cluster_mig_strategy(p.mig.strategy for p in pools if isinstance(p, MigPool))


def _renamed(resource: str, replicas: int, slicing: TimeSlicingConfig | None) -> str:
    if slicing is not None and slicing.rename_by_default and replicas > 1:
        return resource + SHARED_SUFFIX
    return resource


def timeslice_replicas(pool: TimeslicePool) -> int:
    """Replicas per GPU on a timeslice pool (1 when its mapping does not name nvidia.com/gpu, which the
    pool rules report)."""
    return pool.time_slicing.replicas_for((NVIDIA_GPU,)).get(NVIDIA_GPU, 1)


# What a dra pool's devices offer, named for `tessera plan` (they are ResourceSlice capacities of
# the driver's devices, not extended resources of the node).
DRA_CORES = f"{DRA_DRIVER} cores"
DRA_MEMORY_MIB = f"{DRA_DRIVER} memory MiB"


def node_capacity(pool: PoolBase, strategy: MigStrategy) -> dict[str, int]:
    """Extended resource (DRA capacity on a dra pool) -> amount one node of the pool advertises
    (valid after StackConfig validation)."""
    gpus, model = pool.gpus_per_node(), pool.gpu_spec()
    if isinstance(pool, SharedPool):
        cores, memory = (DRA_CORES, DRA_MEMORY_MIB) if pool.allocation == "dra" else (GPU_CORE, GPU_MEMORY)
        return {cores: CORE_PER_GPU * gpus, memory: model.memory_mib * gpus}
    if isinstance(pool, MigPool):
        counts = resolve_layout(model, pool.mig.profile) or {}
        resources = mig_resources(strategy, counts)
        replicas = mig_replicas(pool.mig.strategy, strategy, counts, pool.time_slicing.replicas if pool.time_slicing else None)
        slices = list(counts.values()) if strategy == "mixed" else [next(iter(counts.values()), 0)]
        return {
            _renamed(res, replicas.get(res, 1), pool.time_slicing): n * gpus * replicas.get(res, 1)
            for res, n in zip(resources, slices, strict=True)
        }
    if isinstance(pool, TimeslicePool):
        per_gpu = timeslice_replicas(pool)
        return {_renamed(NVIDIA_GPU, per_gpu, pool.time_slicing): gpus * per_gpu}
    return {NVIDIA_GPU: gpus}


def mig_slice_resource(pool: MigPool, profile: str, strategy: MigStrategy) -> str:
    """The resource one slice of `profile` is advertised as on this pool's nodes."""
    counts = resolve_layout(pool.gpu_spec(), pool.mig.profile) or {}
    (resource,) = mig_resources(strategy, {profile: 1})
    replicas = mig_replicas(pool.mig.strategy, strategy, counts, pool.time_slicing.replicas if pool.time_slicing else None)
    return _renamed(resource, replicas.get(resource, 1), pool.time_slicing)


def replica_request(gpu: WorkloadGpu, pool: PoolBase, strategy: MigStrategy) -> dict[str, int]:
    """Extended resource -> amount one replica asks for on `pool`; only the keys of the pool's kind
    count (the rules report the others)."""
    if isinstance(pool, SharedPool):
        cores, memory = (DRA_CORES, DRA_MEMORY_MIB) if pool.allocation == "dra" else (GPU_CORE, GPU_MEMORY)
        out = {cores: gpu.core} if gpu.core is not None else {}
        if gpu.memory_mib is not None:
            out[memory] = gpu.memory_mib
        return out
    if isinstance(pool, MigPool):
        return {mig_slice_resource(pool, gpu.mig_profile, strategy): 1} if gpu.mig_profile is not None else {}
    if gpu.gpus is None:
        return {}
    if isinstance(pool, TimeslicePool):
        return {_renamed(NVIDIA_GPU, timeslice_replicas(pool), pool.time_slicing): gpu.gpus}
    return {NVIDIA_GPU: gpu.gpus}
