"""What the Tessera sharing stack's builders need from a stack, as small frozen dataclasses.

The builders in this package take these settings, not the pydantic stack model, so that they stay
pure and testable with literal values; `platform_settings()` is the one adapter from
`tessera.model.StackConfig` to them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tessera.model.contract import TESSERA_NAMESPACE, NodePlacement
from tessera.model.leader_election import LeaderElectionTiming
from tessera.model.pool_policy import DEFAULT_POOL_POLICY, PoolPolicy
from tessera.model.pools import AllocationRoute

if TYPE_CHECKING:  # the adapter is the only place that knows the config model
    from tessera.model.stack import StackConfig


@dataclass(frozen=True)
class SharedPool:
    """One `shared` pool's sharing policy, as its pools-file entry carries it."""

    name: str
    policy: PoolPolicy = DEFAULT_POOL_POLICY
    shares_from_labels: bool = False
    """Scheduled re-partitioning owns the pool's shares per GPU (on the node label)."""
    allocation: AllocationRoute = "device-plugin"

    def to_json(self) -> dict[str, Any]:
        return self.policy.pools_entry(shares_from_labels=self.shares_from_labels)


@dataclass(frozen=True)
class ExtenderSettings:
    """The extender's replicas and the timing of their Lease (defaults match the stack config's)."""

    replicas: int = 2
    """Default 2: one leader binds, a standby takes over on a handover or when the leader's Lease expires."""
    leader_election: LeaderElectionTiming = LeaderElectionTiming()


@dataclass(frozen=True)
class SchedulerSettings:
    """The second kube-scheduler and its extender entry (defaults match the stack config's)."""

    placement: NodePlacement = "fragmentation-aware"
    replicas: int = 2
    """Default 2: kube-scheduler elects a leader, a standby takes over within the lease duration."""
    weight: int = 5
    """Extender priority weight; kube-scheduler multiplies the extender's 0-10 score by it."""
    http_timeout_seconds: float = 5.0
    """Default 5 s: filter/prioritize answer in ms; bind writes a ConfigMap and two API calls."""
    log_level: str = "info"
    extender: ExtenderSettings = ExtenderSettings()


@dataclass(frozen=True)
class NamespaceQuota:
    """A ResourceQuota on GPU resources for one namespace (`requests.<resource>` -> quantity)."""

    namespace: str
    hard: dict[str, str]


@dataclass(frozen=True)
class MonitoringSettings:
    """How Prometheus finds Tessera's metrics."""

    enabled: bool = True
    """Expose metrics and add `prometheus.io/*` scrape annotations on the metrics Services."""
    scrape_interval_seconds: int = 30
    metrics_port: int = 9500
    """Port of the node agent's /metrics."""
    device_plugin_metrics_port: int = 9501
    """Port of the device plugin's /metrics (same pod as the agent)."""
    stack_namespace: str | None = None
    """Namespace of the kube-prometheus-stack release Tessera deploys; None when it deploys none."""


@dataclass(frozen=True)
class PlatformSettings:
    """Everything the Tessera sharing stack's manifests depend on."""

    kubernetes_version: str
    tessera_image: str
    kube_scheduler_image: str
    shared_pools: tuple[SharedPool, ...] = ()
    scheduler: SchedulerSettings = SchedulerSettings()
    quotas: tuple[NamespaceQuota, ...] = ()
    monitoring: MonitoringSettings = MonitoringSettings()
    namespace: str = TESSERA_NAMESPACE
    pull_policy: str = "IfNotPresent"
    pull_secrets: tuple[str, ...] = field(default=())

    @property
    def dra_pools(self) -> tuple[SharedPool, ...]:
        """The shared pools on the DRA route."""
        return tuple(p for p in self.shared_pools if p.allocation == "dra")

    @property
    def sharing_enabled(self) -> bool:
        """The extender, second scheduler and node DaemonSet exist only when a shared pool does."""
        return bool(self.shared_pools)

    def pull_secrets_spec(self) -> dict[str, list[dict[str, str]]]:
        """`imagePullSecrets` to merge into a pod spec (nothing when the stack names none)."""
        return {"imagePullSecrets": [{"name": s} for s in self.pull_secrets]} if self.pull_secrets else {}


# Rendering needs a schema version even when an `existing` cluster's version is not given.
DEFAULT_KUBERNETES_VERSION = "1.30.0"


def platform_settings(config: StackConfig) -> PlatformSettings:
    """The adapter: a validated StackConfig -> the settings the builders read."""
    shared = tuple(
        SharedPool(name=p.name, policy=p.sharing.pool_policy(), shares_from_labels=bool(p.repartition), allocation=p.allocation)
        for p in sorted(config.node_pools, key=lambda p: p.name)
        if p.kind == "shared"
    )
    s = config.scheduler
    m = config.monitoring
    return PlatformSettings(
        kubernetes_version=config.cluster.kubernetes_version or DEFAULT_KUBERNETES_VERSION,
        tessera_image=config.tessera_image(),
        kube_scheduler_image=config.kube_scheduler_image(),
        shared_pools=shared,
        scheduler=SchedulerSettings(
            placement=s.placement,
            replicas=s.replicas,
            weight=s.weight,
            http_timeout_seconds=s.http_timeout_seconds,
            log_level=s.log_level,
            extender=ExtenderSettings(replicas=s.extender.replicas, leader_election=s.extender.leader_election.timing()),
        ),
        quotas=tuple(NamespaceQuota(q.namespace, q.hard()) for q in config.quotas if q.hard()),
        monitoring=MonitoringSettings(
            enabled=m.enabled,
            scrape_interval_seconds=m.scrape_interval_seconds,
            metrics_port=m.metrics_port,
            device_plugin_metrics_port=m.device_plugin_metrics_port,
            stack_namespace=m.kube_prometheus_stack.namespace if m.mode == "kube-prometheus-stack" and m.enabled else None,
        ),
        namespace=config.namespace,
        pull_policy=config.images.pull_policy,
        pull_secrets=tuple(config.images.pull_secrets),
    )
