"""Prometheus metrics of the extender, on a registry owned by one server (no global state)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# kube-scheduler's extender timeout is seconds; our target is milliseconds, so the buckets sit there
_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)


class BindOutcome(str, Enum):
    BOUND = "bound"
    ALREADY_BOUND = "already_bound"  # a retry of a bind that had succeeded
    REUSED = "reused"  # a retry that found the pod annotated for the same node
    NO_FIT = "no_fit"
    CONFLICT = "conflict"
    ERROR = "error"


@dataclass
class ExtenderMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        self.requests = Counter(
            "tessera_extender_requests", "HTTP requests by verb and status code", ["verb", "code"], registry=self.registry
        )
        self.latency = Histogram(
            "tessera_extender_request_seconds", "Time to answer, by verb", ["verb"], buckets=_LATENCY_BUCKETS, registry=self.registry
        )
        self.binds = Counter("tessera_extender_binds", "Bind results", ["outcome"], registry=self.registry)
        self.conflicts = Counter(
            "tessera_extender_api_conflicts", "409 answers from the API server during bind (retried)", registry=self.registry
        )
        self.expired = Counter(
            "tessera_extender_expired_reservations", "Annotated-but-unbound reservations released after the TTL", registry=self.registry
        )
        self.nodes = Gauge("tessera_extender_nodes", "Shared GPU nodes in the cache", registry=self.registry)
        self.pods = Gauge("tessera_extender_pods", "Pods holding GPU capacity in the cache", registry=self.registry)
        self.gpus = Gauge("tessera_extender_gpus", "GPUs in the cache", registry=self.registry)
        self.mix_epoch = Gauge(
            "tessera_extender_mix_epoch", "Workload-mix snapshots taken so far (each one re-scores every node)", registry=self.registry
        )
        self.allocated_gpu = Gauge(
            "tessera_extender_allocated_gpu", "GPU compute allocated, in GPUs (1.0 = one whole GPU)", registry=self.registry
        )
