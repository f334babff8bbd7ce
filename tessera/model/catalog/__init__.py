"""The catalog behind cross-field validation: GPU models, TKE GPU instance types, and the
driver/CUDA/cuDNN combinations TKE installs.

Data and lookups only; part of `tessera.model`, imports nothing outside it.
"""
from __future__ import annotations

from tessera.model.catalog.gpu_software import (
    GPU_SOFTWARE,
    CudnnPackage,
    GpuPackage,
    GpuSoftware,
    default_gpu_software,
    matching_software,
    nearest_software,
)
from tessera.model.catalog.gpus import GPU_MODELS, GpuModelSpec, MigProfile, gpu_model
from tessera.model.catalog.instances import INSTANCE_TYPES, InstanceTypeSpec, instance_type

__all__ = [
    "GPU_MODELS",
    "GPU_SOFTWARE",
    "INSTANCE_TYPES",
    "CudnnPackage",
    "GpuModelSpec",
    "GpuPackage",
    "GpuSoftware",
    "InstanceTypeSpec",
    "MigProfile",
    "default_gpu_software",
    "gpu_model",
    "instance_type",
    "matching_software",
    "nearest_software",
]
