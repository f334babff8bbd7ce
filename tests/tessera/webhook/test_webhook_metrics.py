"""The webhook's /metrics over its own HTTPS port: declared families, one count per answered review."""
from __future__ import annotations

import ssl
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from webhook_helpers import SETTINGS, WebhookClient, container, pod, review_body, start_webhook

from tessera.model import contract
from tessera.monitoring.exposition import conformance_problems
from tessera.webhook.metrics import METRICS
from tessera.webhook.tls import CertBundle


@pytest.fixture
def fresh(localhost_bundle: CertBundle) -> Iterator[WebhookClient]:
    """A webhook of its own, so counts start at zero."""
    server, thread = start_webhook(SETTINGS, localhost_bundle)
    yield WebhookClient(server.server_address[1], ssl.create_default_context(cadata=localhost_bundle.ca_pem))
    server.shutdown()
    thread.join(10)


def _outcomes(client: WebhookClient) -> dict[str, float]:
    status, raw = client.request("GET", "/metrics")
    assert status == 200
    text = raw.decode()
    assert conformance_problems(METRICS, text) == []
    return {
        s.labels["outcome"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "tessera_webhook_admissions_total"
    }


def test_each_review_is_counted_once_by_outcome(fresh: WebhookClient) -> None:
    assert _outcomes(fresh) == {"mutated": 0.0, "unchanged": 0.0, "rejected": 0.0, "invalid": 0.0}
    fresh.mutate(pod(container("main", {contract.GPU_CORE: "10"})))
    fresh.mutate(pod(container("web", {"cpu": "1"})))
    fresh.review(review_body(pod(container("main", {contract.GPU_CORE: "10"}), initContainers=[container("w", {contract.GPU_CORE: "10"})])))
    status, _ = fresh.request("POST", "/mutate", b"{not json")
    assert status == 400
    assert _outcomes(fresh) == {"mutated": 1.0, "unchanged": 1.0, "rejected": 1.0, "invalid": 1.0}


def test_admission_latency_is_observed_per_review(fresh: WebhookClient) -> None:
    for _ in range(3):
        fresh.mutate(pod(container("main", {contract.GPU_CORE: "10"})))
    _, raw = fresh.request("GET", "/metrics")
    counts = [s.value for f in text_string_to_metric_families(raw.decode()) for s in f.samples if s.name == "tessera_webhook_admission_seconds_count"]
    assert counts == [3.0]
