"""Prometheus metrics of the extender, on a registry owned by one server (no global state).

`METRICS` declares every family the extender serves (docs/monitoring.md lists the same, a test
compares them, another scrapes a real extender's /metrics against them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tessera.model.metrics.spec import MetricSpec
from tessera.model.metrics.extender import (  # noqa: F401 - the families this module serves
    POOL_LABELS,
    REQUESTS,
    REQUEST_SECONDS,
    BINDS,
    API_CONFLICTS,
    EXPIRED,
    NODES,
    PODS,
    GPUS,
    MIX_EPOCH,
    ALLOCATED_GPU,
    POOL_CAPACITY,
    POOL_ALLOCATED,
    POOL_STRANDED,
    LEADER,
    LEADER_TRANSITIONS,
    RECORD_CONFLICTS,
    AMBIGUOUS_WRITES,
    FORWARDED,
    METRICS,
)

# kube-scheduler's extender timeout is seconds; our target is milliseconds, so the buckets sit there
_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)


class BindOutcome(str, Enum):
    BOUND = "bound"
    ALREADY_BOUND = "already_bound"  # a retry of a bind that had succeeded
    REUSED = "reused"  # a retry that found the pod annotated for the same node
    NO_FIT = "no_fit"
    CONFLICT = "conflict"
    ERROR = "error"


def _counter(spec: MetricSpec, registry: CollectorRegistry) -> Counter:
    return Counter(spec.name, spec.help, list(spec.labels), registry=registry)


def _gauge(spec: MetricSpec, registry: CollectorRegistry) -> Gauge:
    return Gauge(spec.name, spec.help, list(spec.labels), registry=registry)


@dataclass
class ExtenderMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = _counter(REQUESTS, r)
        self.latency = Histogram(REQUEST_SECONDS.name, REQUEST_SECONDS.help, list(REQUEST_SECONDS.labels), buckets=_LATENCY_BUCKETS, registry=r)
        self.binds = _counter(BINDS, r)
        self.conflicts = _counter(API_CONFLICTS, r)
        self.expired = _counter(EXPIRED, r)
        self.nodes = _gauge(NODES, r)
        self.pods = _gauge(PODS, r)
        self.gpus = _gauge(GPUS, r)
        self.mix_epoch = _gauge(MIX_EPOCH, r)
        self.allocated_gpu = _gauge(ALLOCATED_GPU, r)
        self.pool_capacity = _gauge(POOL_CAPACITY, r)
        self.pool_allocated = _gauge(POOL_ALLOCATED, r)
        self.pool_stranded = _gauge(POOL_STRANDED, r)
        self.leader = _gauge(LEADER, r)
        self.leader_transitions = _counter(LEADER_TRANSITIONS, r)
        self.record_conflicts = _gauge(RECORD_CONFLICTS, r)
        self.ambiguous_writes = _counter(AMBIGUOUS_WRITES, r)
        self.forwarded = _counter(FORWARDED, r)
        # every label value exists from the start, so `increase()` sees the first event of a new pod
        for event in ("acquired", "released", "lost"):
            self.leader_transitions.labels(event)
        for write in ("record", "strip", "binding"):
            for outcome in ("applied", "not_applied", "unresolved"):
                self.ambiguous_writes.labels(write, outcome)
        for reason in ("overcommit", "unknown_gpu", "unreadable"):
            self.record_conflicts.labels(reason).set(0)
        for verb in ("filter", "prioritize", "bind", "preempt"):
            for result in ("ok", "no_leader", "failed"):
                self.forwarded.labels(verb, result)

    def set_pools(self, pools: dict[tuple[str, str], tuple[float, float, float]]) -> None:
        """(pool, kind) -> (capacity, allocated, stranded) in GPUs; pools no longer present vanish."""
        for gauge in (self.pool_capacity, self.pool_allocated, self.pool_stranded):
            gauge.clear()
        for (pool, kind), (capacity, allocated, stranded) in sorted(pools.items()):
            self.pool_capacity.labels(pool, kind).set(capacity)
            self.pool_allocated.labels(pool, kind).set(allocated)
            self.pool_stranded.labels(pool, kind).set(stranded)

