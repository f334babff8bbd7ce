"""The extender's /metrics over HTTP: declared families, and pool figures from the placement books."""
from __future__ import annotations

import pytest
from extender_harness import Harness, node_manifest, pod_manifest, wait_until
from prometheus_client.parser import text_string_to_metric_families

from tessera.alloc import PlacementPolicy
from tessera.model.contract import LABEL_POOL
from tessera.kube.fake import FakeKubeApi
from tessera.monitoring.exposition import conformance_problems
from tessera.scheduler.metrics import METRICS

Pools = dict[tuple[str, str], float]


def _pool_gauges(text: str) -> dict[str, Pools]:
    out: dict[str, Pools] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("tessera_pool_"):
            out[family.name] = {(s.labels["pool"], s.labels["kind"]): s.value for s in family.samples}
    return out


def _metrics(harness: Harness) -> str:
    service = harness.services[-1]
    status, text = harness.client(service).get("/metrics")
    assert status == 200
    return text


def test_metrics_page_serves_exactly_the_declared_families(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1", labels={LABEL_POOL: "a"}))
    service = harness.start()
    scheduler = harness.scheduler(service)
    harness.api.create_pod(pod_manifest("p", ("main", 30, None)))
    assert scheduler.schedule("default", "p").node == "n1"
    harness.client(service).post_raw("/filter", b"not json")  # a 400, so the requests family has samples
    assert conformance_problems(METRICS, _metrics(harness)) == []


def test_pool_capacity_and_allocation_follow_binds_and_deletions(harness: Harness) -> None:
    harness.api.create_node(node_manifest("a1", gpus=2, labels={LABEL_POOL: "a"}))
    harness.api.create_node(node_manifest("a2", gpus=2, labels={LABEL_POOL: "a"}))
    harness.api.create_node(node_manifest("b1", gpus=4, labels={LABEL_POOL: "b"}))
    service = harness.start()
    scheduler = harness.scheduler(service)
    for name, core in (("p1", 100), ("p2", 50), ("p3", 25)):
        pod = pod_manifest(name, ("main", core, None))
        pod["spec"]["nodeSelector"] = {LABEL_POOL: "a"}
        harness.api.create_pod(pod)
        assert scheduler.schedule("default", name).node in ("a1", "a2")
    gauges = _pool_gauges(_metrics(harness))
    assert gauges["tessera_pool_gpu_capacity"] == {("a", "shared"): 4.0, ("b", "shared"): 4.0}
    assert gauges["tessera_pool_gpu_allocated"] == {("a", "shared"): 1.75, ("b", "shared"): 0.0}
    harness.api.delete_pod("default", "p1")
    assert wait_until(lambda: _pool_gauges(_metrics(harness))["tessera_pool_gpu_allocated"][("a", "shared")] == 0.75)


def test_stranded_compute_is_idle_compute_the_seen_pods_cannot_use() -> None:
    """Pods of 60 gpu-core leave 40 on every GPU they touch: with only such pods seen, those 40
    are stranded; an empty GPU is not."""
    h = Harness(FakeKubeApi(), policy=PlacementPolicy.SPREAD)
    try:
        h.api.create_node(node_manifest("n1", gpus=2, labels={LABEL_POOL: "a"}))
        service = h.start()
        scheduler = h.scheduler(service)
        h.api.create_pod(pod_manifest("p1", ("main", 60, None)))
        assert scheduler.schedule("default", "p1").node == "n1"
        stranded = _pool_gauges(_metrics(h))["tessera_pool_gpu_stranded"][("a", "shared")]
        assert stranded == pytest.approx(0.4)
    finally:
        h.close()


def test_a_node_that_leaves_takes_its_pool_with_it(harness: Harness) -> None:
    harness.api.create_node(node_manifest("a1", labels={LABEL_POOL: "a"}))
    harness.api.create_node(node_manifest("b1", labels={LABEL_POOL: "b"}))
    harness.start()
    assert set(_pool_gauges(_metrics(harness))["tessera_pool_gpu_capacity"]) == {("a", "shared"), ("b", "shared")}
    harness.api.delete_node("b1")
    assert wait_until(lambda: set(_pool_gauges(_metrics(harness))["tessera_pool_gpu_capacity"]) == {("a", "shared")})
