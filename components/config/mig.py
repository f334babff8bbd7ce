"""MIG layouts: resolving named layouts, checking that a layout fits a GPU, the resources it yields."""
from __future__ import annotations

from components.config.catalog import GpuModelSpec
from tessera.contract import NVIDIA_GPU

MigCounts = dict[str, int]


def resolve_layout(model: GpuModelSpec, layout: str | dict[str, int]) -> MigCounts | None:
    """Profile -> count per GPU; None when a named layout is unknown for this model."""
    if isinstance(layout, str):
        named = model.mig_layouts.get(layout)
        return dict(named) if named is not None else None
    return dict(layout)


def layout_problems(model: GpuModelSpec, layout: str | dict[str, int]) -> list[str]:
    """Why ``layout`` cannot be applied to every GPU of ``model``; empty when it fits.

    Checks names, per-profile maximum counts and the GPU's compute/memory slice totals. NVIDIA's
    placement rules are slightly stricter than slice sums for a few exotic mixes; mig-manager
    reports those at apply time.
    """
    counts = resolve_layout(model, layout)
    if counts is None:
        return [f"{layout!r} is not a named MIG layout of {model.name} (valid: {', '.join(model.mig_layouts)})"]
    problems: list[str] = []
    unknown = [name for name in counts if model.mig_profile(name) is None]
    for name in unknown:
        problems.append(f"{name!r} is not a MIG profile of {model.name} (valid: {', '.join(model.mig_profile_names())})")
    if unknown:
        return problems
    compute = memory = media = 0
    for name, count in counts.items():
        profile = model.mig_profile(name)
        assert profile is not None  # checked above
        if count < 1:
            problems.append(f"count of {name!r} must be at least 1 (got {count})")
        elif count > profile.max_count:
            problems.append(f"{name!r} fits at most {profile.max_count} time(s) on one {model.name} (asked {count})")
        compute += profile.compute_slices * count
        memory += profile.memory_slices * count
        media += count if name.endswith("+me") else 0
    if compute > model.mig_compute_slices:
        problems.append(f"layout uses {compute} compute slices; {model.name} has {model.mig_compute_slices}")
    if memory > model.mig_memory_slices:
        problems.append(f"layout uses {memory} memory slices; {model.name} has {model.mig_memory_slices}")
    if media > 1:
        problems.append("at most one +me (media extensions) instance fits on a GPU")
    return problems


def mig_resources(strategy: str, counts: MigCounts) -> tuple[str, ...]:
    """Extended resources NVIDIA's device plugin advertises for this layout."""
    if strategy == "single":
        return (NVIDIA_GPU,)
    return tuple(f"nvidia.com/mig-{name}" for name in counts)
