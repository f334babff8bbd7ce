"""GPU backends: the `GpuBackend` interface, the NVML adapter and the simulated node.

May import nothing of `tessera`: the NVML and simulated backends are the node's hardware seam.
"""
from __future__ import annotations

from tessera_node.gpu.backend import (
    GpuBackend,
    GpuBackendError,
    GpuClocks,
    GpuIndex,
    GpuInfo,
    GpuUtilisation,
    MigMode,
    Pid,
    ProcessSample,
    XidEvent,
)

__all__ = [
    "GpuBackend",
    "GpuBackendError",
    "GpuClocks",
    "GpuIndex",
    "GpuInfo",
    "GpuUtilisation",
    "MigMode",
    "Pid",
    "ProcessSample",
    "XidEvent",
    "open_backend",
]


def open_backend(simulate: str | None, *, node_seed: str = "sim") -> GpuBackend:
    """The simulated backend for a spec, else NVML. Not opened yet."""
    if simulate:
        from tessera_node.gpu.simulated import SimulatedBackend

        return SimulatedBackend.from_spec(simulate, node_seed=node_seed)
    from tessera_node.gpu.nvml import NvmlBackend

    return NvmlBackend()
