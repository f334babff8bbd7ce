"""The narrow interface every Tessera node component uses to talk to GPUs.

Two implementations sit side by side: `tessera_node.gpu.nvml.NvmlBackend` (real GPUs through
pynvml) and `tessera_node.gpu.simulated.SimulatedBackend` (a scripted node for tests, demos and
benchmarks). Callers never import pynvml themselves, so everything above this seam runs without a
GPU.

All samples are plain frozen dataclasses; the backend owns no policy (what counts as a critical XID
is decided in `tessera_node.gpu.health`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NewType, Protocol

GpuIndex = NewType("GpuIndex", int)
Pid = NewType("Pid", int)


class MigMode(enum.Enum):
    """MIG state of a GPU as the driver reports it (current mode, not pending)."""

    DISABLED = "disabled"
    ENABLED = "enabled"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU on this node."""

    index: GpuIndex
    uuid: str
    model: str
    memory_mib: int
    mig_mode: MigMode = MigMode.UNSUPPORTED
    sm_count: int | None = None  # streaming multiprocessors; None where the backend cannot say (MIG mode on)


@dataclass(frozen=True)
class ProcessSample:
    """GPU use of one process on one GPU (NVML running processes + process utilisation)."""

    pid: Pid
    gpu: GpuIndex
    used_memory_mib: int
    sm_utilisation_pct: int  # 0..100, share of the GPU's SMs this process used in the last sample window


@dataclass(frozen=True)
class GpuUtilisation:
    """Whole-GPU utilisation sample."""

    gpu: GpuIndex
    gpu_pct: int  # percent of time one or more kernels ran
    memory_pct: int  # percent of time device memory was read or written
    used_memory_mib: int


@dataclass(frozen=True)
class GpuClocks:
    gpu: GpuIndex
    sm_mhz: int
    memory_mhz: int
    sm_max_mhz: int
    memory_max_mhz: int


@dataclass(frozen=True)
class XidEvent:
    """A driver Xid error reported for one GPU."""

    gpu: GpuIndex
    xid: int
    detail: str = ""


class GpuBackendError(Exception):
    """The backend could not talk to the driver; the message says what to check."""


class GpuBackend(Protocol):
    """What Tessera needs from a GPU driver. Methods other than `open` require an open backend."""

    def open(self) -> None:
        """Acquire driver handles (nvmlInit). Idempotent."""
        ...

    def close(self) -> None:
        """Release every driver handle, so that e.g. the MIG manager can reconfigure the GPUs. Idempotent."""
        ...

    def list_gpus(self) -> list[GpuInfo]: ...

    def processes(self) -> list[ProcessSample]:
        """Every compute process on every GPU, with its memory and recent SM utilisation."""
        ...

    def utilisation(self) -> list[GpuUtilisation]: ...

    def clocks(self) -> list[GpuClocks]: ...

    def poll_xid_events(self, timeout_s: float) -> list[XidEvent]:
        """Xid events since the previous call; waits up to `timeout_s` for the first one (0 = do not wait)."""
        ...

    def is_responsive(self, gpu: GpuIndex) -> bool:
        """Whether the GPU answers basic queries (a GPU that fell off the bus does not)."""
        ...
