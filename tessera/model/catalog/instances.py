"""TKE (CVM) GPU instance types -> GPU model and GPUs per instance.

Families and sizes follow Tencent Cloud's "GPU computing instance" specification tables
(GN7 = T4, GN10X / GN10Xp = V100 32 GB, GT4 = A100 40 GB NVLink, PNV4 = A10, GN8 = P40).
Sizes marked "unconfirmed" were not checked against a current Tencent Cloud price/spec page;
a pool can always use an unlisted type with ``customInstanceType: true`` plus gpuModel/gpuCount.
Fractional vGPU sizes (e.g. GN7.LARGE20 = 1/4 T4) are left out on purpose: the guest sees a
vGPU, which neither MIG nor Tessera's sharing can split further.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


@dataclass(frozen=True)
class InstanceTypeSpec:
    """One CVM instance type with whole passthrough GPUs."""

    name: str
    gpu_model: str  # key of catalog.gpus.GPU_MODELS
    gpu_count: int
    confirmed: bool = True  # False: figures follow the family's pattern but were not re-checked


def _family(gpu: str, sizes: dict[str, int], unconfirmed: frozenset[str] = frozenset()) -> tuple[InstanceTypeSpec, ...]:
    return tuple(InstanceTypeSpec(name, gpu, count, name not in unconfirmed) for name, count in sizes.items())


INSTANCE_TYPES: Final = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            *_family("T4", {"GN7.2XLARGE32": 1, "GN7.5XLARGE80": 1, "GN7.8XLARGE128": 1, "GN7.10XLARGE160": 2, "GN7.20XLARGE320": 4}),
            *_family(
                "V100-32GB",
                {"GN10X.2XLARGE40": 1, "GN10X.4XLARGE80": 2, "GN10X.9XLARGE160": 4, "GN10X.18XLARGE320": 8},
                unconfirmed=frozenset({"GN10X.4XLARGE80", "GN10X.9XLARGE160", "GN10X.18XLARGE320"}),
            ),
            *_family("V100-32GB", {"GN10Xp.2XLARGE40": 1, "GN10Xp.5XLARGE80": 2, "GN10Xp.10XLARGE160": 4, "GN10Xp.20XLARGE320": 8}),
            *_family("A100-40GB", {"GT4.4XLARGE96": 1, "GT4.8XLARGE192": 2, "GT4.20XLARGE474": 4, "GT4.41XLARGE948": 8}),
            *_family(
                "A10",
                {"PNV4.7XLARGE116": 1, "PNV4.14XLARGE232": 2, "PNV4.28XLARGE466": 4, "PNV4.56XLARGE932": 8},
                unconfirmed=frozenset({"PNV4.56XLARGE932"}),
            ),
            *_family("P40", {"GN8.LARGE56": 1, "GN8.3XLARGE112": 2, "GN8.7XLARGE224": 4, "GN8.14XLARGE448": 8}, unconfirmed=frozenset({"GN8.3XLARGE112", "GN8.7XLARGE224", "GN8.14XLARGE448"})),
        )
    }
)

def instance_type(name: str) -> InstanceTypeSpec | None:
    return INSTANCE_TYPES.get(name)
