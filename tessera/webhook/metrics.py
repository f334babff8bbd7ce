"""Prometheus metrics of the admission webhook, on a registry owned by one server.

Served at GET /metrics on the webhook's own HTTPS port (the ServiceMonitor verifies the
certificate against the CA in the webhook's TLS Secret), so no second listener and no plain-text
port. `METRICS` declares the families (docs/monitoring.md and the tests compare against it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from prometheus_client import CollectorRegistry, Counter, Histogram

from tessera.model.metrics.webhook import (  # noqa: F401 - the families this module serves
    ADMISSIONS,
    ADMISSION_SECONDS,
    METRICS,
)

# The API server's budget is timeoutSeconds (5 s default); a review is answered in well under 10 ms.
_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0)

Outcome = Literal["mutated", "unchanged", "rejected", "invalid"]


def outcome_of(answer: dict[str, Any]) -> Outcome:
    """How an AdmissionReview answer (`admission.review`'s result) counts."""
    response = answer.get("response") or {}
    if not response.get("allowed", True):
        return "rejected"
    return "mutated" if response.get("patch") else "unchanged"


@dataclass
class WebhookMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        self.admissions = Counter(ADMISSIONS.name, ADMISSIONS.help, list(ADMISSIONS.labels), registry=self.registry)
        self.latency = Histogram(ADMISSION_SECONDS.name, ADMISSION_SECONDS.help, buckets=_BUCKETS, registry=self.registry)
        for outcome in ("mutated", "unchanged", "rejected", "invalid"):
            self.admissions.labels(outcome)  # every outcome exists from the start: rate() sees the first one

    def observe(self, outcome: Outcome, seconds: float) -> None:
        self.admissions.labels(outcome).inc()
        self.latency.observe(seconds)
