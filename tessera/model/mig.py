"""MIG layouts: resolving named layouts, checking that a layout fits a GPU, the resources it yields.

Also the cluster-wide MIG strategy: gpu-operator has one `mig.strategy` for the whole cluster (it
sets `MIG_STRATEGY` on every device plugin, which outranks a per-config `flags.migStrategy`), so
the resources a mig pool really advertises follow the cluster's strategy, not the pool's own.
`tessera plan` (tessera.model.plan) and the device plugin configs (tessera.manifests) both
use the functions below, so the plan names exactly the resources the rendered configs produce.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from tessera.model.catalog import GpuModelSpec
from tessera.model.contract import NVIDIA_GPU

MigCounts = dict[str, int]
MigStrategy = Literal["single", "mixed"]


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


def cluster_mig_strategy(pool_strategies: Iterable[str]) -> MigStrategy:
    """The one strategy gpu-operator runs with, given each mig pool's strategy: `mixed` as soon as
    one pool asks for it (a mixed layout cannot be advertised under `single`), else `single` (also
    gpu-operator's default; on GPUs with MIG disabled both advertise whole GPUs as nvidia.com/gpu)."""
    return "mixed" if any(s == "mixed" for s in pool_strategies) else "single"


def mig_replicas(
    pool_strategy: str, cluster_strategy: str, counts: MigCounts, replicas: int | Mapping[str, int] | None
) -> dict[str, int]:
    """Time-slicing replicas per resource the layout yields under the cluster's strategy.

    A pool written for `single` names its slices `nvidia.com/gpu`; when the cluster runs `mixed`
    the same slices appear as `nvidia.com/mig-<profile>`, so that entry is renamed. Resources the
    layout does not yield (a scheduled layout without that profile) are dropped.
    """
    if replicas is None:
        return {}
    resources = mig_resources(cluster_strategy, counts)
    if isinstance(replicas, int):
        return {r: replicas for r in resources}
    wanted = dict(replicas)
    if pool_strategy == "single" and cluster_strategy == "mixed" and NVIDIA_GPU in wanted and len(counts) == 1:
        wanted = {f"nvidia.com/mig-{next(iter(counts))}": wanted.pop(NVIDIA_GPU), **wanted}
    return {r: wanted[r] for r in resources if r in wanted}
