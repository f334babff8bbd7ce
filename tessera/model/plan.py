"""What a stack will create: pools, nodes, GPUs, shareable capacity and in-cluster components.

Pure computation over a validated StackConfig; ``tessera plan`` only formats a StackPlan.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from tessera.model.capacity import node_capacity, pools_mig_strategy
from tessera.model.mig import MigStrategy, mig_replicas, resolve_layout
from tessera.model.plan_monitoring import KUBE_PROMETHEUS_STACK, monitoring_lines
from tessera.model.plan_workloads import WorkloadPlan, plan_workloads
from tessera.model.pools import MigPool, PoolBase, SharedPool, TimeslicePool
from tessera.model.stack import StackConfig
from tessera.model.contract import DRA_DRIVER, NVIDIA_GPU

# in-cluster components, by the name `tessera plan` shows
NVIDIA_DEVICE_PLUGIN: Final = "nvidia-device-plugin"
NVIDIA_DEVICE_PLUGIN_TIME_SLICING: Final = "nvidia-device-plugin (time-slicing)"
MIG_MANAGER: Final = "nvidia-mig-manager"
DCGM_EXPORTER: Final = "dcgm-exporter"
TESSERA_DEVICE_PLUGIN: Final = "tessera-device-plugin"
TESSERA_NODE_AGENT: Final = "tessera-node-agent"
TESSERA_DRA_PLUGIN: Final = "tessera-dra-plugin"
TESSERA_SCHEDULER: Final = "tessera-scheduler"
TESSERA_WEBHOOK: Final = "tessera-webhook"
GPU_OPERATOR: Final = "gpu-operator"
REPARTITION_JOB: Final = "tessera-repartition (CronJobs)"
PROMETHEUS_ADAPTER: Final = "prometheus-adapter"


@dataclass(frozen=True)
class Range:
    """A quantity at the pool's minimum, desired and maximum node counts."""

    min: int
    desired: int
    max: int

    def times(self, factor: int) -> Range:
        return Range(self.min * factor, self.desired * factor, self.max * factor)

    def plus(self, other: Range) -> Range:
        return Range(self.min + other.min, self.desired + other.desired, self.max + other.max)

    def to_json(self) -> dict[str, int]:
        return {"min": self.min, "desired": self.desired, "max": self.max}


ZERO: Final = Range(0, 0, 0)


@dataclass(frozen=True)
class ScheduledLayout:
    """One entry of a pool's re-partitioning schedule, as text."""

    name: str
    cron: str
    timezone: str
    layout: str


@dataclass(frozen=True)
class PoolPlan:
    """One GPU node pool."""

    name: str
    kind: str
    instance_type: str | None  # None on existing clusters
    node_selector: dict[str, str]  # existing clusters: the labels that pick the pool's nodes
    gpu_model: str
    gpu_memory_mib: int
    gpus_per_node: int
    nodes: Range
    gpus: Range
    capacity_per_node: dict[str, int]  # extended resource -> amount one node advertises
    details: tuple[str, ...]  # e.g. "policy fixed-share", "MIG per GPU: 3g.20gb x1"
    components: tuple[str, ...]
    schedule: tuple[ScheduledLayout, ...] = ()

    def capacity(self) -> dict[str, Range]:
        return {name: self.nodes.times(amount) for name, amount in self.capacity_per_node.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "instanceType": self.instance_type,
            "nodeSelector": dict(self.node_selector),
            "gpuModel": self.gpu_model,
            "gpuMemoryMiB": self.gpu_memory_mib,
            "gpusPerNode": self.gpus_per_node,
            "nodes": self.nodes.to_json(),
            "gpus": self.gpus.to_json(),
            "capacityPerNode": dict(self.capacity_per_node),
            "capacity": {k: v.to_json() for k, v in self.capacity().items()},
            "details": list(self.details),
            "components": list(self.components),
            "schedule": [{"name": s.name, "cron": s.cron, "timezone": s.timezone, "layout": s.layout} for s in self.schedule],
        }


@dataclass(frozen=True)
class StackPlan:
    """The whole stack."""

    provider: str
    cluster_name: str
    region: str | None
    kubernetes_version: str | None
    pools: tuple[PoolPlan, ...]
    cluster_components: tuple[str, ...]
    quotas: dict[str, dict[str, str]] = field(default_factory=dict)
    monitoring: tuple[str, ...] = ()
    workloads: tuple[WorkloadPlan, ...] = ()

    @property
    def nodes(self) -> Range:
        total = ZERO
        for pool in self.pools:
            total = total.plus(pool.nodes)
        return total

    @property
    def gpus(self) -> Range:
        total = ZERO
        for pool in self.pools:
            total = total.plus(pool.gpus)
        return total

    def gpus_by_model(self) -> dict[str, Range]:
        out: dict[str, Range] = {}
        for pool in self.pools:
            out[pool.gpu_model] = out.get(pool.gpu_model, ZERO).plus(pool.gpus)
        return out

    def capacity(self) -> dict[str, Range]:
        """Each extended resource summed over pools (nvidia.com/gpu counts time-sliced replicas)."""
        out: dict[str, Range] = {}
        for pool in self.pools:
            for name, amount in pool.capacity().items():
                out[name] = out.get(name, ZERO).plus(amount)
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "cluster": self.cluster_name,
            "region": self.region,
            "kubernetesVersion": self.kubernetes_version,
            "pools": [p.to_json() for p in self.pools],
            "totals": {
                "nodes": self.nodes.to_json(),
                "gpus": self.gpus.to_json(),
                "gpusByModel": {k: v.to_json() for k, v in self.gpus_by_model().items()},
                "capacity": {k: v.to_json() for k, v in self.capacity().items()},
            },
            "clusterComponents": list(self.cluster_components),
            "quotas": self.quotas,
            "monitoring": list(self.monitoring),
            "workloads": [w.to_json() for w in self.workloads],
        }


def _layout_text(layout: int | str | dict[str, int], pool: PoolBase) -> str:
    if isinstance(layout, dict):
        return ", ".join(f"{k} x{v}" for k, v in layout.items())
    if isinstance(pool, SharedPool) and isinstance(layout, int):
        return "whole GPUs" if layout == 1 else f"{layout} shares per GPU"
    if isinstance(pool, TimeslicePool) and isinstance(layout, int):
        return "whole GPUs" if layout == 1 else f"{layout} replicas per GPU"
    return str(layout)


def stack_mig_strategy(cfg: StackConfig) -> MigStrategy:
    """gpu-operator's one MIG strategy for this stack (`mixed` when any mig pool is mixed)."""
    return pools_mig_strategy(cfg.node_pools)


def _kind_plan(pool: PoolBase, cfg: StackConfig) -> tuple[dict[str, int], list[str], list[str]]:
    """(capacity per node, details, node components) for the pool's kind."""
    gpus, model = pool.gpus_per_node(), pool.gpu_spec()
    dcgm = [DCGM_EXPORTER] if cfg.monitoring.enabled and cfg.monitoring.dcgm_exporter and cfg.gpu_operator.enabled else []
    if isinstance(pool, SharedPool):
        sharing = pool.sharing
        details = [f"policy {sharing.policy}", f"GPU placement {sharing.placement}", f"online/offline {'on' if sharing.online_offline else 'off'}", f"memory {sharing.memory_enforcement}"]
        if sharing.shares_per_gpu:
            details.append(f"at most {sharing.shares_per_gpu} containers per GPU")
        if sharing.qgpu_aliases:
            details.append("accepts qGPU resource names")
        if pool.allocation == "dra":
            details.append(f"allocation dra: ResourceClaims on DeviceClass {pool.name}.{DRA_DRIVER}")
            return node_capacity(pool, stack_mig_strategy(cfg)), details, [TESSERA_DRA_PLUGIN, TESSERA_NODE_AGENT, *dcgm]
        return node_capacity(pool, stack_mig_strategy(cfg)), details, [TESSERA_DEVICE_PLUGIN, TESSERA_NODE_AGENT, *dcgm]
    if isinstance(pool, MigPool):
        # resource names follow gpu-operator's one cluster-wide strategy, not the pool's own
        strategy = stack_mig_strategy(cfg)
        counts = resolve_layout(model, pool.mig.profile) or {}
        replicas = mig_replicas(pool.mig.strategy, strategy, counts, pool.time_slicing.replicas if pool.time_slicing else None)
        details = [f"MIG {strategy}: per GPU " + ", ".join(f"{k} x{v}" for k, v in counts.items()), f"{sum(counts.values()) * gpus} MIG slices per node"]
        if strategy != pool.mig.strategy:
            details.append(f"pool asks for {pool.mig.strategy}; gpu-operator runs {strategy} cluster-wide (another mig pool is {strategy})")
        details += [f"time-slicing {res} x{n}" for res, n in replicas.items()]
        plugin = NVIDIA_DEVICE_PLUGIN_TIME_SLICING if replicas else NVIDIA_DEVICE_PLUGIN
        return node_capacity(pool, strategy), details, [plugin, MIG_MANAGER, *dcgm]
    if isinstance(pool, TimeslicePool):
        per_gpu_replicas = pool.time_slicing.replicas_for((NVIDIA_GPU,))[NVIDIA_GPU]
        return node_capacity(pool, stack_mig_strategy(cfg)), [f"time-slicing x{per_gpu_replicas} per GPU (no isolation)"], [NVIDIA_DEVICE_PLUGIN_TIME_SLICING, *dcgm]
    return node_capacity(pool, stack_mig_strategy(cfg)), ["whole GPUs, exclusive"], [NVIDIA_DEVICE_PLUGIN, *dcgm]


def _software_detail(pool: PoolBase) -> str:
    """What TKE installs on the pool's nodes: one whole catalog record, flagged when unconfirmed."""
    software = pool.gpu_software()
    driver = "custom driver" if pool.gpu_driver.custom_driver_url else f"driver {software.driver.version}"
    text = f"TKE installs {driver} + CUDA {software.cuda.version} + cuDNN {software.cudnn.version}"
    return text if software.confirmed else text + " (not in the TencentCloud provider's docs; see docs/nvidia-pools.md)"


def plan_pool(pool: PoolBase, cfg: StackConfig) -> PoolPlan:
    model = pool.gpu_spec()
    gpus = pool.gpus_per_node()
    nodes = Range(pool.min_size, pool.desired, pool.max_size)
    capacity, details, components = _kind_plan(pool, cfg)
    if not cfg.cluster.is_existing:
        details = [*details, _software_detail(pool)]
    schedule = tuple(
        ScheduledLayout(e.name or f"#{i}", e.cron, e.timezone, _layout_text(e.layout, pool)) for i, e in enumerate(pool.repartition)
    )
    return PoolPlan(
        name=pool.name,
        kind=pool.kind,
        instance_type=pool.instance_type,
        node_selector=dict(pool.node_selector),
        gpu_model=model.name,
        gpu_memory_mib=model.memory_mib,
        gpus_per_node=gpus,
        nodes=nodes,
        gpus=nodes.times(gpus),
        capacity_per_node=capacity,
        details=tuple(details),
        components=tuple(components),
        schedule=schedule,
    )


def _scheduler_component(cfg: StackConfig) -> str:
    """The second scheduler and its extender, with the replicas of each (one leader among them)."""
    s = cfg.scheduler
    return f"{TESSERA_SCHEDULER} (kube-scheduler x{s.replicas} + extender x{s.extender.replicas}, each leader-elected)"


def needs_gpu_operator(cfg: StackConfig) -> bool:
    """Whether the stack installs gpu-operator: it serves nvidia, mig and timeslice pools; on shared
    pools only dcgm-exporter needs it (Tessera's device plugin and the node's own container toolkit
    do the rest). The one rule: the plan and the renderers (tessera.manifests.nvidia) both read it."""
    if not cfg.gpu_operator.enabled:
        return False
    return any(not isinstance(p, SharedPool) for p in cfg.node_pools) or cfg.monitoring.dcgm_exporter


def plan_stack(cfg: StackConfig) -> StackPlan:
    """The plan of a validated stack."""
    kinds = {p.kind for p in cfg.node_pools}
    cluster: list[str] = []
    if "shared" in kinds:
        cluster += [_scheduler_component(cfg), TESSERA_WEBHOOK]
    if needs_gpu_operator(cfg):
        cluster.append(GPU_OPERATOR)
    if any(p.repartition for p in cfg.node_pools):
        cluster.append(REPARTITION_JOB)
    if cfg.monitoring.enabled and cfg.monitoring.mode == KUBE_PROMETHEUS_STACK:
        cluster.append(KUBE_PROMETHEUS_STACK)
    if cfg.monitoring.enabled and cfg.monitoring.prometheus_adapter:
        cluster.append(PROMETHEUS_ADAPTER)
    return StackPlan(
        provider=cfg.cluster.provider,
        cluster_name=cfg.cluster.name,
        region=cfg.region,
        kubernetes_version=cfg.cluster.kubernetes_version,
        pools=tuple(plan_pool(p, cfg) for p in cfg.node_pools),
        cluster_components=tuple(cluster),
        quotas={q.namespace: q.hard() for q in cfg.quotas},
        monitoring=monitoring_lines(cfg),
        workloads=plan_workloads(cfg),
    )
