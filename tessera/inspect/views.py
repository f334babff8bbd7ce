"""What `tessera inspect` shows, as values: GPUs, nodes, pools, flagged and pending pods.

Built by `tessera.inspect.build` from Node and Pod objects, rendered by `tessera.inspect.render`.
Compute is in percent of one GPU (`tessera.dev/gpu-core`), memory in MiB per GPU. Node, pool and
cluster totals count healthy GPUs only (an unhealthy GPU gives no capacity); the GPU rows of an
unhealthy GPU still show what its pods hold.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from tessera.model.contract import CORE_PER_GPU


class Reason(str, Enum):
    """Why a pod is flagged; the values are stable (JSON `flaggedPods[].reason`)."""

    UNBOUND = "unbound"  # reserved by the extender, not bound yet (held until bound or the assume TTL)
    NODE_GONE = "node-gone"  # the record names a node that is gone or not a shared GPU node (not counted)
    GPU_GONE = "gpu-gone"  # the record names a GPU index/UUID the node does not report (not counted)
    NODE_MISMATCH = "node-mismatch"  # bound to another node than its record names (not counted)
    UNREADABLE_RECORD = "unreadable-record"  # `tessera.dev/allocation` is not a valid record (not counted)
    NO_RECORD = "no-record"  # asks for tessera.dev/* and is bound, but has no record: it cannot start
    UNHEALTHY_GPU = "unhealthy-gpu"  # holds a share of an unhealthy GPU (the device plugin evicts it)
    INVALID_REQUEST = "invalid-request"  # its tessera.dev/* request cannot be scheduled as written


@dataclass(frozen=True)
class ContainerShare:
    """One container's part of one GPU."""

    namespace: str
    pod: str
    container: str
    gpu_index: int
    core: int  # percent of this GPU
    memory_mib: int  # MiB on this GPU; 0 = the container asked for no memory limit
    app_class: str | None  # online | offline | None (unset: treated as online)
    phase: str
    bound: bool  # False: reserved by the extender, not bound yet


@dataclass(frozen=True)
class GpuView:
    index: int
    uuid: str
    model: str
    memory_mib: int
    healthy: bool
    core_allocated: int
    memory_allocated_mib: int
    shares: tuple[ContainerShare, ...]
    stranded: bool = False

    @property
    def pods(self) -> int:
        return len({(s.namespace, s.pod) for s in self.shares})

    @property
    def overcommitted(self) -> bool:
        """More given out than the GPU has: two records claim the same capacity (should not happen)."""
        return self.core_allocated > CORE_PER_GPU or self.memory_allocated_mib > self.memory_mib


@dataclass(frozen=True)
class Totals:
    """Sums over healthy GPUs (capacity is what can be given out); `gpus` counts all of them."""

    gpus: int = 0
    unhealthy_gpus: int = 0
    core_allocated: int = 0
    core_capacity: int = 0
    memory_allocated_mib: int = 0
    memory_capacity_mib: int = 0
    pods: int = 0
    stranded_gpu: float | None = None

    @staticmethod
    def of_gpus(gpus: Sequence[GpuView], stranded_gpu: float | None) -> Totals:
        healthy = [g for g in gpus if g.healthy]
        return Totals(
            gpus=len(gpus),
            unhealthy_gpus=len(gpus) - len(healthy),
            core_allocated=sum(g.core_allocated for g in healthy),
            core_capacity=CORE_PER_GPU * len(healthy),
            memory_allocated_mib=sum(g.memory_allocated_mib for g in healthy),
            memory_capacity_mib=sum(g.memory_mib for g in healthy),
            pods=len({(s.namespace, s.pod) for g in gpus for s in g.shares}),
            stranded_gpu=stranded_gpu,
        )

    @staticmethod
    def combine(parts: Iterable[Totals]) -> Totals:
        parts = list(parts)
        stranded = [p.stranded_gpu for p in parts if p.stranded_gpu is not None]
        return Totals(
            gpus=sum(p.gpus for p in parts),
            unhealthy_gpus=sum(p.unhealthy_gpus for p in parts),
            core_allocated=sum(p.core_allocated for p in parts),
            core_capacity=sum(p.core_capacity for p in parts),
            memory_allocated_mib=sum(p.memory_allocated_mib for p in parts),
            memory_capacity_mib=sum(p.memory_capacity_mib for p in parts),
            pods=sum(p.pods for p in parts),
            stranded_gpu=round(sum(stranded), 3) if stranded else None,
        )


@dataclass(frozen=True)
class SharedNode:
    name: str
    pool: str
    kind: str  # the pool-kind label ("shared", or "" on an unlabelled node with a GPU inventory)
    status: str  # Ready | NotReady | Unknown, with ",SchedulingDisabled" when cordoned (as kubectl)
    sharing_policy: str
    gpu_placement: str
    gpus: tuple[GpuView, ...]
    totals: Totals
    problem: str | None = None  # no or unreadable GPU inventory


@dataclass(frozen=True)
class ResourceUse:
    name: str  # nvidia.com/gpu, nvidia.com/mig-1g.10gb, ...
    allocatable: int
    requested: int


@dataclass(frozen=True)
class WholeGpuNode:
    name: str
    pool: str
    kind: str  # nvidia | mig | timeslice, or "" on an unlabelled node with nvidia.com/* resources
    status: str
    resources: tuple[ResourceUse, ...]
    pods: int


@dataclass(frozen=True)
class Pool:
    name: str
    kind: str
    nodes: int
    pods: int  # pods holding shared GPUs plus pods requesting nvidia.com/* on the pool's nodes
    totals: Totals  # shared nodes
    resources: tuple[ResourceUse, ...]  # whole-GPU nodes, summed per resource


@dataclass(frozen=True)
class FlaggedPod:
    namespace: str
    pod: str
    node: str  # the node its record names, else the node it is bound to, else ""
    reason: Reason
    detail: str


@dataclass(frozen=True)
class PendingPod:
    """Asks for tessera.dev/* and is neither bound nor reserved: waiting for the scheduler."""

    namespace: str
    pod: str
    core: int  # gpu-core percent, summed over its containers (N whole GPUs = N*100)
    memory_mib: int  # gpu-memory MiB, per-GPU value times GPUs, summed over containers (0 = none asked)


@dataclass(frozen=True)
class Inspection:
    source: str
    shared_nodes: tuple[SharedNode, ...]
    whole_gpu_nodes: tuple[WholeGpuNode, ...]
    pools: tuple[Pool, ...]
    totals: Totals
    flagged: tuple[FlaggedPod, ...]
    pending: tuple[PendingPod, ...]
    node_filter: tuple[str, ...] = ()
    pool_filter: tuple[str, ...] = ()


class FilterError(ValueError):
    """A --node or --pool names nothing in the cluster; the message lists what exists."""
