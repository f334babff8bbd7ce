"""A shared pool's policy: one typed record, its defaults, its two wire forms and its one reader.

The stack config (`nodePools[i].sharing`) is written to the cluster twice: as the pool's entry in
the pools file (the `tessera-pools` ConfigMap, mounted at `contract.POOLS_FILE`) and as labels on
the pool's nodes. The extender, the device plugin and the node agent all turn those back into a
`PoolPolicy` with `read_pool_policy`, under one rule:

- per setting, the pools file entry of the node's pool (`tessera.dev/pool`) wins when it states
  the setting; a policy edit in stack config reaches it without restarts (kubelet refreshes the
  mounted file), while node labels of existing nodes may lag (TKE applies pool labels to new
  nodes; `provider: existing` relabels on `pulumi up`);
- a setting the entry leaves out comes from the node's label; the file leaves `sharesPerGpu` out
  exactly when scheduled re-partitioning owns it, because the re-partition job moves it on the
  label (`tessera.dev/max-shares-per-gpu`) without touching the file;
- otherwise the reader's fallback: this record's defaults, which the stack config model's
  defaults are (`SharingConfig` takes its defaults from `DEFAULT_POOL_POLICY`);
- a value that cannot be read (unknown policy, `sharesPerGpu: 0`, a label `yes`) counts as not
  stated and is reported in `PolicyReading.problems`, so a typo falls through to the next source
  instead of stopping containers from starting.

A pools file that cannot be read at all is the watcher's business (`pools_file.PoolsFile`): the
last good document stays in force.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final, Literal, get_args

from tessera.model.contract import (
    LABEL_GPU_PLACEMENT,
    LABEL_MAX_SHARES_PER_GPU,
    LABEL_MEMORY_ENFORCEMENT,
    LABEL_ONLINE_OFFLINE,
    LABEL_POOL,
    LABEL_SHARING_POLICY,
    GpuPlacement,
    SharingPolicy,
)

MemoryEnforcement = Literal["warn", "enforce"]

MAX_SHARES_PER_GPU: Final = 100  # one gpu-core unit each
MAX_OFFLINE_RESUME_IDLE_S: Final = 3600.0


@dataclass(frozen=True)
class PoolPolicy:
    """How a shared pool splits each GPU; the defaults are the stack config's."""

    sharing: SharingPolicy = "best-effort"
    """best-effort needs nothing beyond the GPU (no MPS daemon), so it is the default."""
    placement: GpuPlacement = "binpack"
    """binpack keeps whole GPUs free for large requests."""
    online_offline: bool = False
    """Pausing offline work happens only on pools that asked for co-location."""
    qgpu_aliases: bool = False
    memory_enforcement: MemoryEnforcement = "enforce"
    """A container over its tessera.dev/gpu-memory would take memory a neighbour was promised."""
    offline_resume_idle_s: float = 2.0
    """Long enough that bursty online traffic does not thrash freeze/thaw per request, short
    enough that offline work loses little time after a burst."""
    shares_per_gpu: int | None = None
    """None: limited only by 100 gpu-core units per GPU."""

    @property
    def uses_mps(self) -> bool:
        """fixed-share caps compute through an MPS daemon per GPU; no other policy runs one."""
        return self.sharing == "fixed-share"

    def pools_entry(self, *, shares_from_labels: bool = False) -> dict[str, Any]:
        """This pool's object in the pools file. `shares_from_labels`: scheduled re-partitioning
        owns shares per GPU, so the entry leaves it to the node label."""
        entry = {_FILE_KEYS[f]: getattr(self, f) for f in _FIELDS}
        if shares_from_labels:
            del entry["sharesPerGpu"]
        return entry

    def node_labels(self) -> dict[str, str]:
        """The labels the pool's nodes carry for this policy (those the reader reads back)."""
        labels = {
            LABEL_SHARING_POLICY: self.sharing,
            LABEL_GPU_PLACEMENT: self.placement,
            LABEL_ONLINE_OFFLINE: "true" if self.online_offline else "false",
            LABEL_MEMORY_ENFORCEMENT: self.memory_enforcement,
        }
        if self.shares_per_gpu is not None:
            labels[LABEL_MAX_SHARES_PER_GPU] = str(self.shares_per_gpu)
        return labels


DEFAULT_POOL_POLICY: Final = PoolPolicy()

_FIELDS: Final = tuple(f.name for f in fields(PoolPolicy))
_FILE_KEYS: Final[Mapping[str, str]] = {
    "sharing": "policy",
    "placement": "placement",
    "online_offline": "onlineOffline",
    "qgpu_aliases": "qgpuAliases",
    "memory_enforcement": "memoryEnforcement",
    "offline_resume_idle_s": "offlineResumeIdleSeconds",
    "shares_per_gpu": "sharesPerGpu",
}
# Settings with a node label; the others (qGPU aliases, the resume delay) only travel in the file.
POLICY_LABELS: Final[Mapping[str, str]] = {
    "sharing": LABEL_SHARING_POLICY,
    "placement": LABEL_GPU_PLACEMENT,
    "online_offline": LABEL_ONLINE_OFFLINE,
    "memory_enforcement": LABEL_MEMORY_ENFORCEMENT,
    "shares_per_gpu": LABEL_MAX_SHARES_PER_GPU,
}


class _Unreadable(ValueError):
    """A value in the pools file or a label that is not one of the setting's values."""


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if isinstance(value, str) and value in options:
            return value
        raise _Unreadable(f"expected one of {', '.join(options)}, found {value!r}")
    return parse


def _file_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise _Unreadable(f"expected true or false, found {value!r}")


def _label_bool(value: Any) -> bool:
    if value in ("true", "false"):
        return bool(value == "true")
    raise _Unreadable(f"expected \"true\" or \"false\", found {value!r}")


def _idle_seconds(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= MAX_OFFLINE_RESUME_IDLE_S:
        return float(value)
    raise _Unreadable(f"expected seconds in (0, {MAX_OFFLINE_RESUME_IDLE_S:g}], found {value!r}")


def _file_shares(value: Any) -> int | None:
    if value is None:
        return None  # stated: no cap beyond compute
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SHARES_PER_GPU:
        return value
    raise _Unreadable(f"expected null or a whole number 1-{MAX_SHARES_PER_GPU}, found {value!r}")


def _label_shares(value: Any) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_SHARES_PER_GPU:
        return int(value)
    raise _Unreadable(f"expected a whole number 1-{MAX_SHARES_PER_GPU}, found {value!r}")


_FILE_PARSERS: Final[Mapping[str, Callable[[Any], Any]]] = {
    "sharing": _choice(get_args(SharingPolicy)),
    "placement": _choice(get_args(GpuPlacement)),
    "online_offline": _file_bool,
    "qgpu_aliases": _file_bool,
    "memory_enforcement": _choice(get_args(MemoryEnforcement)),
    "offline_resume_idle_s": _idle_seconds,
    "shares_per_gpu": _file_shares,
}
_LABEL_PARSERS: Final[Mapping[str, Callable[[Any], Any]]] = {
    "sharing": _choice(get_args(SharingPolicy)),
    "placement": _choice(get_args(GpuPlacement)),
    "online_offline": _label_bool,
    "memory_enforcement": _choice(get_args(MemoryEnforcement)),
    "shares_per_gpu": _label_shares,
}


@dataclass(frozen=True)
class PolicyReading:
    """What a component believes about its node's pool, and what it could not read on the way."""

    policy: PoolPolicy
    sources: Mapping[str, Literal["pools file", "label", "default"]]
    problems: tuple[str, ...] = ()


def read_pool_policy(
    labels: Mapping[str, str], document: Mapping[str, Any], *, fallback: PoolPolicy = DEFAULT_POOL_POLICY
) -> PolicyReading:
    """The policy of the node with `labels`, given the pools `document` (see the module's rule)."""
    pool = labels.get(LABEL_POOL, "")
    entry = document.get(pool) if pool else None
    if entry is not None and not isinstance(entry, Mapping):
        reading = _read(None, pool, labels, fallback)
        problem = f"pools file {pool}: expected an object of pool settings, found {type(entry).__name__}"
        return PolicyReading(reading.policy, reading.sources, (problem, *reading.problems))
    return _read(entry, pool, labels, fallback)


def policy_from_entry(entry: Mapping[str, Any], *, fallback: PoolPolicy = DEFAULT_POOL_POLICY) -> PoolPolicy:
    """A policy stored in pools-entry form elsewhere (the node's container registry), read by the
    same rule with no labels; keys it lacks take `fallback`'s values."""
    return _read(entry, "", {}, fallback).policy


def _read(entry: Mapping[str, Any] | None, pool: str, labels: Mapping[str, str], fallback: PoolPolicy) -> PolicyReading:
    problems: list[str] = []
    values: dict[str, Any] = {}
    sources: dict[str, Literal["pools file", "label", "default"]] = {}
    for name in _FIELDS:
        key = _FILE_KEYS[name]
        if entry is not None and key in entry:
            try:
                values[name], sources[name] = _FILE_PARSERS[name](entry[key]), "pools file"
                continue
            except _Unreadable as exc:
                problems.append(f"pools file {pool}.{key}: {exc}")
        label = POLICY_LABELS.get(name)
        if label is not None and label in labels:
            try:
                values[name], sources[name] = _LABEL_PARSERS[name](labels[label]), "label"
                continue
            except _Unreadable as exc:
                problems.append(f"label {label}: {exc}")
        values[name], sources[name] = getattr(fallback, name), "default"
    return PolicyReading(PoolPolicy(**values), sources, tuple(problems))
