"""Scheduled re-partitioning (seed 002: 1:4 by day, 1:1 at night): which labels go on which nodes.

The plan is computed at render time from stack config (`tessera.manifests.repartition`) and
mounted into the CronJobs as JSON, so the in-cluster job needs no stack file. Per pool kind, a
layout is carried by node labels that the component owning that pool kind already watches:

| kind      | labels set                                                    | who acts on them              |
| --------- | ------------------------------------------------------------- | ----------------------------- |
| mig       | `nvidia.com/mig.config`, `nvidia.com/device-plugin.config`    | mig-manager, device plugin    |
| timeslice | `nvidia.com/device-plugin.config`                             | NVIDIA device plugin          |
| shared    | `tessera.dev/max-shares-per-gpu`                              | Tessera extender (new pods)   |

Every kind also gets `tessera.dev/layout=<index>` so `kubectl get nodes -L tessera.dev/layout`
shows what each node runs. MIG nodes are changed one at a time, each after its GPU pods are gone
and only once the previous node reports `nvidia.com/mig.config.state=success`, so a re-partition
never takes a whole pool down at once.
"""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from zoneinfo import ZoneInfo

from tessera.model.cron import parse_cron
from tessera.model.contract import (
    LABEL_LAYOUT,
    LABEL_MAX_SHARES_PER_GPU,
    LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG,
    LABEL_NVIDIA_MIG_CONFIG,
    LABEL_POOL,
    PoolKind,
    mig_config_name,
)
from tessera.kube.api import KubeApi, KubeObject

LABEL_MIG_CONFIG_STATE: Final = "nvidia.com/mig.config.state"  # set by mig-manager: pending|success|failed
LABEL_VALUE_MAX: Final = 63
LOOKBACK: Final = dt.timedelta(days=8)  # a weekly schedule always fired within the last 8 days
NVIDIA_RESOURCE_PREFIX: Final = "nvidia.com/"


def layout_config_name(pool: str, index: int) -> str:
    """mig-parted config and device-plugin config key of re-partitioning entry `index` of `pool`:
    `tessera-<pool>.<index>`. Also a node label value, so at most 63 characters."""
    name = f"{mig_config_name(pool)}.{index}"
    if len(name) > LABEL_VALUE_MAX:
        raise ValueError(f"pool name {pool!r} is too long for its layout label {name!r}; shorten it to fit 63 characters")
    return name


def layout_labels(kind: PoolKind, pool: str, index: int, layout: int | str | Mapping[str, int]) -> dict[str, str]:
    """The node labels that put `pool`'s nodes on layout `index`."""
    labels = {LABEL_LAYOUT: str(index)}
    if kind == "mig":
        name = layout_config_name(pool, index)
        labels[LABEL_NVIDIA_MIG_CONFIG] = name
        labels[LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG] = name  # slice names change with the layout
    elif kind == "timeslice":
        labels[LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG] = layout_config_name(pool, index)
    elif kind == "shared":
        if not isinstance(layout, int):
            raise ValueError(f"pool {pool}: a shared pool's layout is shares per GPU, got {layout!r}")
        labels[LABEL_MAX_SHARES_PER_GPU] = str(layout)
    else:
        raise ValueError(f"pool {pool}: {kind} pools are not re-partitioned")
    return labels


@dataclass(frozen=True)
class ScheduledLayout:
    index: int
    cron: str
    timezone: str
    labels: dict[str, str]
    name: str | None = None


@dataclass(frozen=True)
class PoolPlan:
    """One pool's schedule, as the CronJobs read it."""

    pool: str
    kind: PoolKind
    layouts: tuple[ScheduledLayout, ...]

    @property
    def one_node_at_a_time(self) -> bool:
        """MIG changes take a node's GPUs away for a while; the others apply in seconds."""
        return self.kind == "mig"

    def layout(self, index: int) -> ScheduledLayout:
        for layout in self.layouts:
            if layout.index == index:
                return layout
        raise KeyError(f"pool {self.pool} has no layout {index} (it has {', '.join(str(l.index) for l in self.layouts)})")

    def to_json(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "kind": self.kind,
            "layouts": [
                {"index": l.index, "name": l.name, "cron": l.cron, "timezone": l.timezone, "labels": dict(sorted(l.labels.items()))}
                for l in self.layouts
            ],
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> PoolPlan:
        layouts = tuple(
            ScheduledLayout(int(l["index"]), str(l["cron"]), str(l["timezone"]), {str(k): str(v) for k, v in l["labels"].items()}, l.get("name"))
            for l in data["layouts"]
        )
        return PoolPlan(str(data["pool"]), data["kind"], layouts)


def plan_document(plans: Sequence[PoolPlan]) -> str:
    return json.dumps({"pools": [p.to_json() for p in sorted(plans, key=lambda p: p.pool)]}, indent=2, sort_keys=True) + "\n"


def load_plan(text: str, pool: str) -> PoolPlan:
    """The plan of `pool` from the mounted document; KeyError names the pools it has."""
    pools = [PoolPlan.from_json(p) for p in json.loads(text)["pools"]]
    for plan in pools:
        if plan.pool == pool:
            return plan
    raise KeyError(f"no re-partitioning schedule for pool {pool!r} (scheduled pools: {', '.join(p.pool for p in pools) or 'none'})")


def last_fire(cron: str, timezone: str, now: dt.datetime) -> dt.datetime | None:
    """The latest minute at or before `now` at which `cron` (read in `timezone`) fired, within LOOKBACK."""
    schedule = parse_cron(cron)
    local = now.astimezone(ZoneInfo(timezone)).replace(second=0, microsecond=0)
    moment = local
    while local - moment <= LOOKBACK:
        if schedule.matches(moment):
            return moment
        moment -= dt.timedelta(minutes=1)
    return None


def active_layout(plan: PoolPlan, now: dt.datetime) -> ScheduledLayout | None:
    """The layout whose schedule fired most recently: the one the pool should be on now."""
    fired = [(t, l) for l in plan.layouts if (t := last_fire(l.cron, l.timezone, now)) is not None]
    if not fired:
        return None
    return max(fired, key=lambda pair: (pair[0], -pair[1].index))[1]


def label_changes(node: KubeObject, labels: Mapping[str, str]) -> dict[str, str]:
    """The subset of `labels` the node does not carry yet (empty: nothing to do)."""
    current = (node.get("metadata") or {}).get("labels") or {}
    return {k: v for k, v in sorted(labels.items()) if current.get(k) != v}


def gpu_pods_on(api: KubeApi, node: str) -> list[str]:
    """Running or pending pods on `node` holding an NVIDIA resource (MIG slices, whole GPUs)."""
    names = []
    for pod in api.list_pods(node_name=node):
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        spec = pod.get("spec") or {}
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            resources = container.get("resources") or {}
            keys = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
            if any(k.startswith(NVIDIA_RESOURCE_PREFIX) for k in keys):
                meta = pod.get("metadata") or {}
                names.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
                break
    return names


@dataclass(frozen=True)
class RolloutSettings:
    """How patient the job is with MIG nodes."""

    idle_timeout_s: float = 1800.0
    """Default 30 min: how long to wait for a node's GPU pods to finish before giving up on it."""
    reconfigure_timeout_s: float = 900.0
    """Default 15 min: mig-manager's reconfiguration (may include a GPU reset) per node."""
    poll_interval_s: float = 10.0
    """Default 10 s between checks."""


@dataclass
class ApplyReport:
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed


def _wait(check: Callable[[], tuple[str | None, bool]], timeout_s: float, poll_s: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> str | None:
    """Poll `check` until it reports done (reason None), a terminal failure, or the timeout;
    returns None when done, else the last reason."""
    deadline = clock() + timeout_s
    while True:
        reason, terminal = check()
        if reason is None or terminal or clock() >= deadline:
            return reason
        sleep(poll_s)


def apply_layout(
    api: KubeApi,
    plan: PoolPlan,
    index: int,
    *,
    settings: RolloutSettings = RolloutSettings(),
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    new_nodes_only: bool = False,
    dry_run: bool = False,
) -> ApplyReport:
    """Relabel the pool's nodes for layout `index` (MIG pools node by node). `new_nodes_only`
    touches only nodes that never got a layout (joined since the last switch); `dry_run` reports
    the nodes that would change without patching."""
    labels = plan.layout(index).labels
    report = ApplyReport()
    for node in sorted(api.list_nodes(label_selector=f"{LABEL_POOL}={plan.pool}"), key=lambda n: str(n["metadata"]["name"])):
        name = str(node["metadata"]["name"])
        current = (node.get("metadata") or {}).get("labels") or {}
        changes = label_changes(node, labels)
        if not changes or (new_nodes_only and LABEL_LAYOUT in current):
            if plan.one_node_at_a_time and not changes and current.get(LABEL_MIG_CONFIG_STATE) == "failed":
                # already labelled by an earlier run whose reconfiguration failed: keep it visible
                report.failed[name] = "mig-manager reported nvidia.com/mig.config.state=failed for this layout earlier"
            else:
                report.unchanged.append(name)
            continue
        if dry_run:
            report.changed.append(name)
        elif not plan.one_node_at_a_time:
            api.patch_node_labels(name, changes)
            report.changed.append(name)
        elif not _switch_mig_node(api, name, changes, report, settings, clock, sleep):
            break  # do not take a second node down while this one is not back
    return report


def _switch_mig_node(
    api: KubeApi,
    name: str,
    changes: dict[str, str],
    report: ApplyReport,
    settings: RolloutSettings,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> bool:
    """Wait for the node's GPU pods to end, relabel, wait for mig-manager. False = stop the rollout."""
    busy = _wait(lambda: _busy_reason(api, name), settings.idle_timeout_s, settings.poll_interval_s, clock, sleep)
    if busy is not None:
        report.failed[name] = f"not re-partitioned: {busy} after {settings.idle_timeout_s:.0f}s"
        return True  # this node keeps its layout; the next one may be idle
    # Mark the change pending in the same patch: the node still says "success" from its previous
    # layout until mig-manager notices, and that must not be read as done.
    api.patch_node_labels(name, {**changes, LABEL_MIG_CONFIG_STATE: "pending"})
    report.changed.append(name)
    pending = _wait(lambda: _mig_state_reason(api, name), settings.reconfigure_timeout_s, settings.poll_interval_s, clock, sleep)
    if pending is not None:
        report.failed[name] = pending
        return False
    return True


def _busy_reason(api: KubeApi, node: str) -> tuple[str | None, bool]:
    pods = gpu_pods_on(api, node)
    return (f"GPU pods still running ({', '.join(pods)})" if pods else None), False


def _mig_state_reason(api: KubeApi, node: str) -> tuple[str | None, bool]:
    state = ((api.get_node(node).get("metadata") or {}).get("labels") or {}).get(LABEL_MIG_CONFIG_STATE)
    if state == "success":
        return None, False
    if state == "failed":
        return "mig-manager reported nvidia.com/mig.config.state=failed (see the nvidia-mig-manager pod log on the node)", True
    return f"mig-manager did not finish in time (nvidia.com/mig.config.state={state or 'unset'})", False
