"""The catalog behind cross-field validation: GPU models and TKE GPU instance types.

Data and lookups only; part of `tessera.model`, imports nothing outside it.
"""
from __future__ import annotations

from tessera.model.catalog.gpus import GPU_MODELS, GpuModelSpec, MigProfile, gpu_model
from tessera.model.catalog.instances import (
    GPU_SOFTWARE_BY_ARCHITECTURE,
    INSTANCE_TYPES,
    GpuSoftware,
    InstanceTypeSpec,
    instance_type,
)


def default_gpu_software(model: GpuModelSpec) -> GpuSoftware:
    """The driver/CUDA/cuDNN TKE installs on a node of this GPU model unless the pool overrides it."""
    return GPU_SOFTWARE_BY_ARCHITECTURE[model.architecture]


__all__ = [
    "GPU_MODELS",
    "GPU_SOFTWARE_BY_ARCHITECTURE",
    "INSTANCE_TYPES",
    "GpuModelSpec",
    "GpuSoftware",
    "InstanceTypeSpec",
    "MigProfile",
    "default_gpu_software",
    "gpu_model",
    "instance_type",
]
