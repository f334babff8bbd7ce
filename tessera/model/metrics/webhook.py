"""Metrics the admission webhook serves (GET /metrics on its HTTPS port).

Names, types, labels and meaning are a contract with Prometheus, the dashboards and the alerts;
`tessera.webhook.metrics` registers and fills them.
"""
from __future__ import annotations

from typing import Final

from tessera.model.metrics.spec import MetricSpec

ADMISSIONS: Final = MetricSpec(
    "tessera_webhook_admissions",
    "counter",
    "AdmissionReviews answered, by outcome: mutated (patched), unchanged, rejected (pod refused), invalid (not an AdmissionReview: HTTP 400)",
    ("outcome",),
)
ADMISSION_SECONDS: Final = MetricSpec("tessera_webhook_admission_seconds", "histogram", "Time to answer one AdmissionReview, body read to reply written")
METRICS: Final = (ADMISSIONS, ADMISSION_SECONDS)
