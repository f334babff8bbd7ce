"""GPU models Tessera knows: memory, MIG capability, MIG profiles and named MIG layouts.

Figures come from NVIDIA's MIG user guide ("Supported MIG Profiles": fraction of SMs and memory,
number of instances available). Profile memory is the nominal size in the profile name, in MiB;
the node agent reports what NVML actually sees, which is a little less.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

GIB: Final = 1024  # MiB per GiB


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile, e.g. ``3g.20gb`` on an A100-40GB."""

    name: str
    compute_slices: int  # of GpuModelSpec.mig_compute_slices (7 on A100/H100 class, 4 on A30)
    memory_slices: int  # of GpuModelSpec.mig_memory_slices (8 on A100/H100 class, 4 on A30)
    max_count: int  # instances of this profile that fit on one GPU
    memory_mib: int

    @property
    def resource_name(self) -> str:
        """The extended resource NVIDIA's device plugin advertises with the mixed strategy."""
        return f"nvidia.com/mig-{self.name}"


@dataclass(frozen=True)
class GpuModelSpec:
    """One GPU model; ``mig_profiles`` is empty for GPUs without MIG."""

    name: str
    memory_mib: int
    architecture: str
    mig_compute_slices: int = 0
    mig_memory_slices: int = 0
    mig_profiles: tuple[MigProfile, ...] = ()
    # named layouts as in NVIDIA mig-parted's default config (the nvidia.com/mig.config label values)
    mig_layouts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    def mig_profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.mig_profiles)


def _gb(name: str) -> int:
    """Nominal memory of a profile from its name: '3g.20gb' -> 20 GiB in MiB."""
    return int(name.split(".")[1].removesuffix("gb").removesuffix("+me")) * GIB


def _profiles(rows: tuple[tuple[str, int, int, int], ...]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(name, c, m, n, _gb(name.replace("+me", ""))) for name, c, m, n in rows)


def _seven_slice(one: str, one_double: str, two: str, three: str, four: str, seven: str) -> tuple[MigProfile, ...]:
    """The profile table shared by every 7-compute / 8-memory-slice GPU (A100, H100, H20, H200)."""
    return _profiles(
        (
            (one, 1, 1, 7),
            (f"{one}+me", 1, 1, 1),
            (one_double, 1, 2, 4),
            (two, 2, 2, 3),
            (three, 3, 4, 2),
            (four, 4, 4, 1),
            (seven, 7, 8, 1),
        )
    )


def _layouts(profiles: tuple[MigProfile, ...], balanced: dict[str, int]) -> dict[str, dict[str, int]]:
    """mig-parted's default names: all-<profile> fills the GPU with one profile; all-balanced mixes."""
    # label values cannot hold '+', so mig-parted spells media-extension layouts all-1g.5gb.me
    layouts = {f"all-{p.name.replace('+me', '.me')}": {p.name: p.max_count} for p in profiles}
    layouts["all-balanced"] = balanced
    return layouts


def _mig_model(name: str, memory_gib: int, arch: str, profiles: tuple[MigProfile, ...], balanced: dict[str, int], compute: int = 7, memory: int = 8) -> GpuModelSpec:
    return GpuModelSpec(name, memory_gib * GIB, arch, compute, memory, profiles, _layouts(profiles, balanced))


_A100_40 = _seven_slice("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
_X_80 = _seven_slice("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
# H20: NVIDIA lists it as a 96 GB, 7-instance MIG GPU. 1g.12gb, 2g.24gb, 3g.48gb and 7g.96gb appear in
# published device-plugin configs; 1g.24gb and 4g.48gb follow the A100/H100 pattern (unconfirmed).
_H20 = _seven_slice("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb")
_H200 = _seven_slice("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")
_A30 = _profiles((("1g.6gb", 1, 1, 4), ("1g.6gb+me", 1, 1, 1), ("2g.12gb", 2, 2, 2), ("2g.12gb+me", 2, 2, 1), ("4g.24gb", 4, 4, 1)))

GPU_MODELS: Final = MappingProxyType(
    {
    spec.name: spec
    for spec in (
        GpuModelSpec("T4", 16 * GIB, "turing"),
        GpuModelSpec("A10", 24 * GIB, "ampere"),
        GpuModelSpec("V100-32GB", 32 * GIB, "volta"),
        GpuModelSpec("P40", 24 * GIB, "pascal"),
        GpuModelSpec("L4", 24 * GIB, "ada"),
        GpuModelSpec("L20", 48 * GIB, "ada"),
        GpuModelSpec("L40", 48 * GIB, "ada"),
        GpuModelSpec("L40S", 48 * GIB, "ada"),
        _mig_model("A30", 24, "ampere", _A30, {"1g.6gb": 2, "2g.12gb": 1}, compute=4, memory=4),
        _mig_model("A100-40GB", 40, "ampere", _A100_40, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        _mig_model("A100-80GB", 80, "ampere", _X_80, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        _mig_model("H100-80GB", 80, "hopper", _X_80, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        _mig_model("H20", 96, "hopper", _H20, {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1}),
        _mig_model("H200", 141, "hopper", _H200, {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
    )
    }
)


def gpu_model(name: str) -> GpuModelSpec | None:
    return GPU_MODELS.get(name)
