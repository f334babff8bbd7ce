"""The cache follows the API server: inventory changes, GPU health, lost watches."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from extender_harness import Harness, node_manifest, pod_manifest, wait_until

from tessera.model.contract import ANNOTATION_NODE_GPUS, LABEL_POOL_KIND
from tessera.kube.api import KubeApiError, WatchEvent
from tessera.kube.fake import FakeKubeApi


class GoneOnceApi(FakeKubeApi):
    """The first pod watch resumed from a version answers 410 Gone (history compacted)."""

    def __init__(self) -> None:
        super().__init__()
        self.gone_served = 0

    def watch_pods(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        if resource_version is not None and not self.gone_served:
            self.gone_served += 1
            raise KubeApiError(410, "too old resource version")
        return super().watch_pods(resource_version=resource_version, stop_after_s=stop_after_s)


def _set_health(harness: Harness, node: str, healthy: bool) -> None:
    inventory = json.loads(harness.api.get_node(node)["metadata"]["annotations"][ANNOTATION_NODE_GPUS])
    inventory[0]["healthy"] = healthy
    harness.api.patch_node_annotations(node, {ANNOTATION_NODE_GPUS: json.dumps(inventory)})


def test_unhealthy_gpu_takes_no_new_work_but_keeps_its_pods_accounted(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1))
    service = harness.start()
    scheduler = harness.scheduler(service)
    harness.api.create_pod(pod_manifest("running", ("main", 60, None)))
    assert scheduler.schedule("default", "running").node == "n1"
    gpu = lambda: service.state.cluster.nodes["n1"].gpus[0]  # noqa: E731
    _set_health(harness, "n1", False)
    assert wait_until(lambda: not gpu().healthy)
    harness.api.create_pod(pod_manifest("small", ("main", 30, None)))
    attempt = scheduler.schedule("default", "small")
    assert attempt.node is None and "GPU" in attempt.failed["n1"]
    assert gpu().used_milli == 600  # the running pod still holds its 60 %
    _set_health(harness, "n1", True)
    assert wait_until(lambda: gpu().healthy)
    assert scheduler.schedule("default", "small").node == "n1"
    harness.api.create_pod(pod_manifest("big", ("main", 50, None)))
    assert scheduler.schedule("default", "big").node is None  # 60 + 30 + 50 > 100


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"metadata": {"labels": {LABEL_POOL_KIND: "nvidia"}}}, "tessera.dev/gpus"),  # pool re-labelled
        ({"metadata": {"annotations": {ANNOTATION_NODE_GPUS: None}}}, "tessera.dev/gpus"),  # inventory withdrawn
    ],
)
def test_node_leaving_the_shared_pool_is_filtered_out(harness: Harness, change: dict[str, dict[str, dict[str, str | None]]], reason: str) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1))
    service = harness.start()
    scheduler = harness.scheduler(service)
    meta = change["metadata"]
    if "labels" in meta:
        harness.api.patch_node_labels("n1", meta["labels"])
    else:
        harness.api.patch_node_annotations("n1", meta["annotations"])
    harness.api.create_pod(pod_manifest("p", ("main", 10, None)))
    assert wait_until(lambda: service.state.summary()[0] == 0)
    attempt = scheduler.schedule("default", "p")
    assert attempt.node is None and reason in attempt.unresolvable["n1"]


def test_lost_watch_history_is_recovered_by_relisting() -> None:
    harness = Harness(GoneOnceApi())
    try:
        harness.api.create_node(node_manifest("n1", gpus=1))
        service = harness.start()
        scheduler = harness.scheduler(service)
        harness.api.create_pod(pod_manifest("holder", ("main", 100, None)))
        assert scheduler.schedule("default", "holder").node == "n1"
        harness.api.delete_pod("default", "holder")
        assert wait_until(lambda: service.state.summary()[1] == 0)
        assert isinstance(harness.api, GoneOnceApi) and harness.api.gone_served == 1
        harness.api.create_pod(pod_manifest("next", ("main", 100, None)))
        assert scheduler.schedule("default", "next").node == "n1"
    finally:
        harness.close()
