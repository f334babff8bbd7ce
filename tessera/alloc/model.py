"""Value types of the allocation model: GPUs, nodes, requests and placements.

Compute is counted internally in *milli-GPUs* (1000 per GPU). The public resource
`tessera.dev/gpu-core` is in percent (1 % = 10 milli); traces such as Alibaba's openb give
`gpu_milli` directly, so the simulator keeps their full precision. Memory is in MiB per GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Final, NamedTuple, NewType

from tessera.model.contract import CORE_PER_GPU, GPU_CORE, LABEL_GPU_PLACEMENT, LABEL_MAX_SHARES_PER_GPU, AppClass, GpuPlacement

MILLI_PER_GPU: Final = 1000
MILLI_PER_CORE: Final = MILLI_PER_GPU // CORE_PER_GPU  # 10 milli = 1 % of a GPU
UNTRACKED: Final = 1 << 62  # capacity used when a node's CPU or host memory is not accounted

NodeName = NewType("NodeName", str)
PodUid = NewType("PodUid", str)


class InvalidRequest(ValueError):
    """A pod asks for something the model cannot express; the message says what to change."""


class ReserveConflict(RuntimeError):
    """A reservation no longer fits (capacity changed since the placement was computed)."""


class FitFailure(str, Enum):
    """Why a pod does not fit on a node (`str` so it can go straight into an HTTP reply)."""

    UNKNOWN_NODE = "node is not in the GPU inventory"
    CPU = "not enough free CPU"
    MEMORY = "not enough free host memory"
    GPU_MODEL = "no GPU of a requested model"
    GPU = "not enough free GPU compute or GPU memory"


@dataclass(frozen=True)
class ContainerRequest:
    """What one container asks for. `gpu_count` GPUs with `gpu_milli` free each.

    A share of one GPU is `gpu_count=1, gpu_milli<1000`; N whole GPUs are `gpu_count=N,
    gpu_milli=1000`; `gpu_count=0` is a container without GPU. `gpu_memory_mib` is per GPU;
    None means no memory constraint (whole GPUs always get all their memory).
    """

    name: str
    gpu_count: int
    gpu_milli: int
    gpu_memory_mib: int | None = None

    def __post_init__(self) -> None:
        if self.gpu_count < 0 or self.gpu_milli < 0:
            raise InvalidRequest(f"container {self.name!r}: GPU request must not be negative")
        if self.gpu_count == 0 and (self.gpu_milli or self.gpu_memory_mib):
            raise InvalidRequest(f"container {self.name!r}: GPU memory or compute without a GPU")
        if self.gpu_count > 0 and not 0 < self.gpu_milli <= MILLI_PER_GPU:
            raise InvalidRequest(f"container {self.name!r}: per-GPU compute must be 1..{MILLI_PER_GPU} milli")
        if self.gpu_count > 1 and self.gpu_milli != MILLI_PER_GPU:
            raise InvalidRequest(f"container {self.name!r}: more than one GPU must be whole GPUs")
        if self.gpu_memory_mib is not None and self.gpu_memory_mib < 0:
            raise InvalidRequest(f"container {self.name!r}: GPU memory must not be negative")

    @staticmethod
    def from_core(name: str, gpu_core: int, gpu_memory_mib: int | None = None) -> ContainerRequest:
        """From the public resource: 1..99 = a share of one GPU, N*100 = N whole GPUs."""
        if gpu_core < 0:
            raise InvalidRequest(f"container {name!r}: {GPU_CORE} must not be negative, got {gpu_core}")
        if gpu_core > CORE_PER_GPU and gpu_core % CORE_PER_GPU:
            raise InvalidRequest(
                f"container {name!r}: {GPU_CORE}={gpu_core}: above {CORE_PER_GPU} it must be a multiple of "
                f"{CORE_PER_GPU} (N whole GPUs); use {gpu_core // CORE_PER_GPU * CORE_PER_GPU} or "
                f"{(gpu_core // CORE_PER_GPU + 1) * CORE_PER_GPU}"
            )
        if gpu_core == 0:
            if gpu_memory_mib:
                raise InvalidRequest(f"container {name!r}: GPU memory requested without {GPU_CORE}")
            return ContainerRequest(name, 0, 0, None)
        if gpu_core >= CORE_PER_GPU:
            return ContainerRequest(name, gpu_core // CORE_PER_GPU, MILLI_PER_GPU, gpu_memory_mib)
        return ContainerRequest(name, 1, gpu_core * MILLI_PER_CORE, gpu_memory_mib)

    @property
    def whole(self) -> bool:
        return self.gpu_count > 0 and self.gpu_milli == MILLI_PER_GPU

    @property
    def total_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def gpu_core(self) -> int:
        """Per-GPU compute in percent, rounded up (what the allocation record carries)."""
        return -(-self.gpu_milli // MILLI_PER_CORE)


class PodShape(NamedTuple):
    """Everything of a pod that can change a policy's score, so scores can be cached per node
    and shape (pods that differ only in uid, name or namespace share one)."""

    gpus: tuple[tuple[int, int, int | None], ...]  # (GPU count, milli, GPU memory MiB) per GPU container, in order
    cpu_milli: int
    memory_mib: int
    gpu_models: frozenset[str] | None
    app_class: AppClass | None


@dataclass(frozen=True)
class PodRequest:
    """A pod as the allocator sees it. Containers are allocated one by one, in order."""

    uid: PodUid
    containers: tuple[ContainerRequest, ...]
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_models: frozenset[str] | None = None  # None = any model
    app_class: AppClass | None = None  # None behaves as online
    namespace: str = ""
    name: str = ""
    shape: PodShape = field(init=False, repr=False, compare=False)
    # derived once: the policies read them for every node they score
    gpu_milli_total: int = field(init=False, repr=False, compare=False)
    gpu_containers: tuple[ContainerRequest, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        gpus = tuple((c.gpu_count, c.gpu_milli, c.gpu_memory_mib) for c in self.containers if c.gpu_count)
        object.__setattr__(self, "shape", PodShape(gpus, self.cpu_milli, self.memory_mib, self.gpu_models, self.app_class))
        object.__setattr__(self, "gpu_milli_total", sum(c.total_milli for c in self.containers))
        object.__setattr__(self, "gpu_containers", tuple(c for c in self.containers if c.gpu_count))


@dataclass(slots=True)
class GpuState:
    """One GPU and what is allocated on it."""

    index: int
    uuid: str
    model: str
    memory_mib: int
    healthy: bool = True
    used_milli: int = 0
    used_memory_mib: int = 0
    offline_milli: int = 0  # part of used_milli held by offline pods
    shares: int = 0  # containers holding a share (not a whole GPU) of it; capped by max_shares_per_gpu
    sm_count: int | None = None  # as the node reports it; only the MPS percentage uses it, never placement

    # Never negative: records in conflict can count a GPU past 100 % (`Cluster.restore(force=True)`),
    # and every fit check and fragmentation measure reads "nothing free" from that.
    @property
    def free_milli(self) -> int:
        free = MILLI_PER_GPU - self.used_milli
        return free if free > 0 else 0

    @property
    def free_memory_mib(self) -> int:
        free = self.memory_mib - self.used_memory_mib
        return free if free > 0 else 0

    @property
    def idle(self) -> bool:
        return self.used_milli == 0 and self.used_memory_mib == 0


@dataclass(slots=True)
class NodeState:
    """One GPU node. `cpu_milli`/`memory_mib` None: not accounted here (kube-scheduler checks them)."""

    name: str
    gpus: list[GpuState]
    cpu_milli: int | None = None
    memory_mib: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    used_cpu_milli: int = 0
    used_memory_mib: int = 0
    version: int = 0  # bumped on every change; caches key on it

    @property
    def free_cpu_milli(self) -> int:
        return (UNTRACKED if self.cpu_milli is None else self.cpu_milli) - self.used_cpu_milli

    @property
    def free_memory_mib(self) -> int:
        return (UNTRACKED if self.memory_mib is None else self.memory_mib) - self.used_memory_mib

    @property
    def gpu_placement(self) -> GpuPlacement | None:
        """The pool's GPU-level policy from the node label, None when the label is absent/unknown."""
        value = self.labels.get(LABEL_GPU_PLACEMENT)
        if value == "binpack":
            return "binpack"
        if value == "spread":
            return "spread"
        return None

    @property
    def max_shares_per_gpu(self) -> int | None:
        """Most containers sharing one GPU (`tessera.dev/max-shares-per-gpu`, set by scheduled
        re-partitioning or the pool's `sharesPerGpu`); None when absent or unreadable (no cap
        beyond compute). Whole-GPU requests are not affected."""
        value = self.labels.get(LABEL_MAX_SHARES_PER_GPU, "")
        return int(value) if value.isdigit() and int(value) > 0 else None

    @property
    def models(self) -> frozenset[str]:
        return frozenset(g.model for g in self.gpus)


@dataclass(frozen=True)
class GpuGrant:
    """The part of one GPU given to one container."""

    index: int
    milli: int
    memory_mib: int  # MiB taken on this GPU (whole GPUs take all of it; 0 = no memory limit asked)


@dataclass(frozen=True)
class ContainerPlacement:
    name: str
    grants: tuple[GpuGrant, ...]


@dataclass(frozen=True)
class Placement:
    """Where a pod goes: the node and the GPU(s) of each container (GPU containers only)."""

    node: str
    containers: tuple[ContainerPlacement, ...]
    score: float = 0.0

    @property
    def gpu_indices(self) -> frozenset[int]:
        return frozenset(g.index for c in self.containers for g in c.grants)
