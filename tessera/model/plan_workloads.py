"""What each workload asks of its pool, for `tessera plan` (pure, over a validated StackConfig).

Per workload: the share of one replica, the replica range and what scales it, and the GPU resources
it holds at maxReplicas against what its pool offers at maxSize nodes. Notes point at what the
validation cannot refuse but an operator must know: all workloads of a pool at their maximum
together exceeding it, and scheduled MIG layouts that offer none of a workload's slices.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.model.capacity import node_capacity, pools_mig_strategy, replica_request
from tessera.model.mig import resolve_layout
from tessera.model.pools import MigPool, PoolBase
from tessera.model.workloads import Workload

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig


@dataclass(frozen=True)
class WorkloadPlan:
    """One workload of the stack."""

    name: str
    namespace: str
    pool: str
    pool_kind: str
    per_replica: dict[str, int]  # extended resource -> amount one replica holds
    min_replicas: int
    max_replicas: int
    scaling: str  # e.g. "HPA on avg_time_queue_us (Pods), target 50 average per pod"
    at_max: dict[str, int]  # per_replica x max_replicas
    pool_capacity: dict[str, int]  # what the pool offers at maxSize nodes, for the same resources
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "pool": self.pool,
            "poolKind": self.pool_kind,
            "perReplica": dict(self.per_replica),
            "replicas": {"min": self.min_replicas, "max": self.max_replicas},
            "scaling": self.scaling,
            "atMaxReplicas": dict(self.at_max),
            "poolCapacityAtMaxSize": dict(self.pool_capacity),
            "notes": list(self.notes),
        }


def _scaling_text(w: Workload) -> str:
    metric = w.scaling.metric
    if metric is None:
        return f"fixed at {w.scaling.min_replicas}"
    per = " per replica (average)" if metric.target_type == "AverageValue" else ""
    source = "declared rule" if metric.query is not None else "built-in rule"
    return f"HPA on {metric.name} ({metric.type}, adapter {source}), target {metric.target}{per}"


def _layout_notes(w: Workload, pool: PoolBase) -> list[str]:
    """Scheduled MIG layouts in which the workload's profile does not exist."""
    if not isinstance(pool, MigPool) or w.gpu.mig_profile is None:
        return []
    out = []
    for i, entry in enumerate(pool.repartition):
        if isinstance(entry.layout, int):
            continue
        counts = resolve_layout(pool.gpu_spec(), entry.layout) or {}
        if w.gpu.mig_profile not in counts:
            out.append(
                f"layout {entry.name or f'#{i}'} ({entry.cron}) offers no {w.gpu.mig_profile} slice: its nodes are skipped while "
                "replicas use them; scale the workload down before it"
            )
    return out


def plan_workloads(cfg: StackConfig) -> tuple[WorkloadPlan, ...]:
    strategy = pools_mig_strategy(cfg.node_pools)
    demand: dict[tuple[str, str], int] = {}
    drafts: list[tuple[Workload, PoolBase, dict[str, int], dict[str, int]]] = []
    for w in cfg.workloads:
        pool = cfg.pool(w.pool)
        per_replica = replica_request(w.gpu, pool, strategy)
        per_node = node_capacity(pool, strategy)
        capacity = {r: per_node.get(r, 0) * pool.max_size for r in per_replica}
        for resource, amount in per_replica.items():
            demand[(pool.name, resource)] = demand.get((pool.name, resource), 0) + amount * w.scaling.max_replicas
        drafts.append((w, pool, per_replica, capacity))
    out = []
    for w, pool, per_replica, capacity in drafts:
        notes = _layout_notes(w, pool)
        for resource in per_replica:
            total = demand[(pool.name, resource)]
            if total > capacity[resource]:
                notes.append(f"all workloads on pool {pool.name} at maxReplicas need {total} {resource}, more than its {capacity[resource]}")
        out.append(WorkloadPlan(
            name=w.name,
            namespace=w.namespace,
            pool=pool.name,
            pool_kind=pool.kind,
            per_replica=per_replica,
            min_replicas=w.scaling.min_replicas,
            max_replicas=w.scaling.max_replicas,
            scaling=_scaling_text(w),
            at_max={r: n * w.scaling.max_replicas for r, n in per_replica.items()},
            pool_capacity=capacity,
            notes=tuple(notes),
        ))
    return tuple(out)
