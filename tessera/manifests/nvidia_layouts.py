"""NVIDIA pool layouts: the mig-parted configs and device-plugin configs each pool (and each of its
scheduled layouts) needs, and the config names node labels point at.

Naming: a pool's own layout is `tessera-<pool>` (`tessera.model.contract.mig_config_name` /
`device_plugin_config_name`); re-partitioning entry *i* is `tessera-<pool>.<i>`. The dot cannot
appear in a pool name (a DNS label), so pool `a` layout 1 never collides with a pool named `a-1`.

MIG strategy: gpu-operator sets `MIG_STRATEGY` on the device plugin from its one cluster-wide
`mig.strategy`, and the plugin ranks environment above its config file, so a per-entry
`flags.migStrategy` cannot differ in practice. `cluster_mig_strategy` picks `mixed` as soon as one
mig pool asks for it; a `single` pool then gets `nvidia.com/mig-<profile>` resources instead of
`nvidia.com/gpu` (its time-slicing replicas are translated; docs/nvidia-pools.md explains).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tessera.model.mig import MigStrategy, mig_replicas, resolve_layout
from tessera.model.mig import cluster_mig_strategy as mig_cluster_strategy
from tessera.model.pools import MigPool, PoolBase, TimeSlicingConfig, TimeslicePool
from tessera.model.plan import needs_gpu_operator
from tessera.model.stack import StackConfig
from tessera.model.contract import NVIDIA_GPU, device_plugin_config_name, mig_config_name
from tessera.model.labels_taints import MIG_DISABLED as MIG_DISABLED_CONFIG  # the entry that non-mig pools' nodes are labelled with
from tessera.repartition import layout_config_name

DEFAULT_DEVICE_PLUGIN_CONFIG: Final = "default"

__all__ = [
    "DEFAULT_DEVICE_PLUGIN_CONFIG",
    "MIG_DISABLED_CONFIG",
    "DevicePluginEntry",
    "MigLayoutEntry",
    "cluster_mig_strategy",
    "device_plugin_config_name",
    "device_plugin_entries",
    "layout_config_name",
    "mig_config_name",
    "mig_layout_entries",
]


@dataclass(frozen=True)
class MigLayoutEntry:
    """One named mig-parted config: every GPU of the node gets `counts` (profile -> instances)."""

    name: str
    counts: dict[str, int]


@dataclass(frozen=True)
class DevicePluginEntry:
    """One key of the device plugin ConfigMap: time-slicing replicas per resource (empty = none)."""

    name: str
    replicas: dict[str, int]
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False


def cluster_mig_strategy(config: StackConfig) -> MigStrategy:
    """`mixed` if any mig pool is mixed, else `single` (tessera.model.mig.cluster_mig_strategy,
    which `tessera plan` uses too)."""
    return mig_cluster_strategy(p.mig.strategy for p in config.node_pools if isinstance(p, MigPool))


def _counts(pool: MigPool, layout: str | dict[str, int]) -> dict[str, int]:
    counts = resolve_layout(pool.gpu_spec(), layout)
    if counts is None:  # StackConfig validation rejects unknown names; guard for direct callers
        raise ValueError(f"pool {pool.name}: {layout!r} is not a MIG layout of {pool.gpu_spec().name}")
    return counts


def _mig_layouts(pool: MigPool) -> list[tuple[str, dict[str, int]]]:
    """(config name, profile counts) for the pool's own layout and each scheduled layout."""
    out = [(mig_config_name(pool.name), _counts(pool, pool.mig.profile))]
    for index, entry in enumerate(pool.repartition):
        if isinstance(entry.layout, int):
            raise ValueError(f"pool {pool.name}: repartition[{index}] must be a MIG layout, not {entry.layout}")
        out.append((layout_config_name(pool.name, index), _counts(pool, entry.layout)))
    return out


def mig_layout_entries(config: StackConfig) -> list[MigLayoutEntry]:
    """Every mig-parted config the stack's nodes may be labelled with, `all-disabled` first."""
    entries = [MigLayoutEntry(MIG_DISABLED_CONFIG, {})]
    for pool in config.node_pools:
        if isinstance(pool, MigPool):
            entries.extend(MigLayoutEntry(name, counts) for name, counts in _mig_layouts(pool))
    return entries


def _mig_replicas(pool: MigPool, counts: dict[str, int], strategy: MigStrategy) -> dict[str, int]:
    """Time-slicing replicas for the resources this layout yields under the cluster's strategy."""
    ts = pool.time_slicing
    return mig_replicas(pool.mig.strategy, strategy, counts, ts.replicas if ts is not None else None)


def _entry(name: str, replicas: dict[str, int], ts: TimeSlicingConfig | None) -> DevicePluginEntry:
    shared = {r: n for r, n in replicas.items() if n > 1}  # 1 replica = the resource is not shared
    return DevicePluginEntry(
        name=name,
        replicas=shared,
        rename_by_default=bool(ts and ts.rename_by_default),
        fail_requests_greater_than_one=bool(ts and ts.fail_requests_greater_than_one),
    )


def _timeslice_replicas(layout: int | dict[str, int]) -> dict[str, int]:
    return {NVIDIA_GPU: layout} if isinstance(layout, int) else dict(layout)


def device_plugin_entries(config: StackConfig) -> list[DevicePluginEntry]:
    """The `default` entry (nodes without a device-plugin.config label: nvidia pools) and one entry
    per mig/timeslice pool and per scheduled layout of those pools."""
    strategy = cluster_mig_strategy(config)
    entries = [DevicePluginEntry(DEFAULT_DEVICE_PLUGIN_CONFIG, {})]
    for pool in config.node_pools:
        if isinstance(pool, MigPool):
            layouts = _mig_layouts(pool)
            entries.append(_entry(device_plugin_config_name(pool.name), _mig_replicas(pool, layouts[0][1], strategy), pool.time_slicing))
            for (name, counts) in layouts[1:]:
                entries.append(_entry(name, _mig_replicas(pool, counts, strategy), pool.time_slicing))
        elif isinstance(pool, TimeslicePool):
            ts = pool.time_slicing
            entries.append(_entry(device_plugin_config_name(pool.name), ts.replicas_for((NVIDIA_GPU,)), ts))
            for index, entry in enumerate(pool.repartition):
                if isinstance(entry.layout, str):
                    raise ValueError(f"pool {pool.name}: repartition[{index}] must be replicas, not {entry.layout!r}")
                entries.append(_entry(layout_config_name(pool.name, index), _timeslice_replicas(entry.layout), ts))
    return entries


def device_plugin_document(entry: DevicePluginEntry, strategy: MigStrategy) -> dict[str, Any]:
    """One config in NVIDIA k8s-device-plugin's `version: v1` schema."""
    doc: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": strategy}}
    if entry.replicas:
        doc["sharing"] = {
            "timeSlicing": {
                "renameByDefault": entry.rename_by_default,
                "failRequestsGreaterThanOne": entry.fail_requests_greater_than_one,
                "resources": [{"name": r, "replicas": n} for r, n in sorted(entry.replicas.items())],
            }
        }
    return doc


def mig_parted_document(entries: Sequence[MigLayoutEntry]) -> dict[str, Any]:
    """The whole mig-parted `config.yaml` (`version: v1`, `mig-configs:`)."""
    configs: dict[str, Any] = {}
    for entry in entries:
        if entry.counts:
            configs[entry.name] = [{"devices": "all", "mig-enabled": True, "mig-devices": dict(entry.counts)}]
        else:
            configs[entry.name] = [{"devices": "all", "mig-enabled": False}]
    return {"version": "v1", "mig-configs": configs}


def pools_with_mig_capable_gpus(config: StackConfig) -> list[PoolBase]:
    """Pools whose GPUs support MIG: mig-manager must run there (mig pools are partitioned; the
    others are held at `all-disabled` so a previously partitioned GPU is handed out whole)."""
    out: list[PoolBase] = []
    for pool in config.node_pools:
        try:
            capable = pool.gpu_spec().mig_capable
        except LookupError:
            capable = False
        if capable:
            out.append(pool)
    return out
