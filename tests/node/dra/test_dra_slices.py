"""This node's ResourceSlice: its shape, and publishing it as the API server lets (create with
generateName, replace with the resourceVersion read, 409 retried, extras deleted)."""
from __future__ import annotations

from typing import Any

import pytest

from tessera.kube.fake import FakeKubeApi
from tessera.model.contract import DRA_DRIVER, LABEL_POOL, NodeGpu
from tessera.model.pool_policy import PoolPolicy
from tessera_node.dra.slices import SlicePublisher, slice_body, slice_spec

GPUS = [NodeGpu(1, "GPU-b", "T4", 15360, True, 40), NodeGpu(0, "GPU-a", "T4", 15360, True, 40)]
LABELS = {LABEL_POOL: "pool-a"}


def test_one_device_per_healthy_gpu_with_cores_memory_and_the_pools_policy() -> None:
    gpus = [*GPUS, NodeGpu(2, "GPU-c", "T4", 15360, False)]
    spec = slice_spec("n1", gpus, PoolPolicy(sharing="fixed-share", online_offline=True), LABELS, 3)
    assert spec["driver"] == DRA_DRIVER and spec["nodeName"] == "n1"
    assert spec["pool"] == {"name": "n1", "generation": 3, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    device = spec["devices"][0]
    assert device["attributes"] == {
        "model": {"string": "T4"}, "uuid": {"string": "GPU-a"}, "index": {"int": 0}, "pool": {"string": "pool-a"},
        "sharingPolicy": {"string": "fixed-share"}, "onlineOffline": {"bool": True},
    }
    assert device["capacity"]["cores"]["value"] == "100" and device["capacity"]["memory"]["value"] == "15360Mi"
    assert device["capacity"]["cores"]["requestPolicy"]["validRange"] == {"min": "1", "max": "100", "step": "1"}
    assert device["allowMultipleAllocations"] is True


@pytest.mark.parametrize(("shares", "multiple"), [(None, True), (4, True), (1, False)])
def test_multiple_allocations_where_the_pool_shares_a_gpu(shares: int | None, multiple: bool) -> None:
    (device, _) = slice_spec("n1", GPUS, PoolPolicy(shares_per_gpu=shares), LABELS, 1)["devices"]
    assert device.get("allowMultipleAllocations", False) is multiple


def _publish(kube: FakeKubeApi, publisher: SlicePublisher, gpus: list[NodeGpu], policy: PoolPolicy | None = None) -> dict[str, Any]:
    written = publisher.publish(gpus, policy or PoolPolicy(), LABELS)
    assert written is not None
    return written


def test_create_then_nothing_then_replace_with_a_new_generation() -> None:
    kube = FakeKubeApi()
    publisher = SlicePublisher(kube, "n1")
    first = _publish(kube, publisher, GPUS)
    assert first["metadata"]["name"].startswith("n1-gpu.tessera.dev-") and len(first["metadata"]["name"]) == len("n1-gpu.tessera.dev-") + 5
    assert _publish(kube, publisher, GPUS) == first and publisher.writes == 1
    second = _publish(kube, publisher, GPUS[:1])
    assert second["metadata"]["name"] == first["metadata"]["name"]
    assert second["spec"]["pool"]["generation"] == 2 and second["metadata"]["generation"] == 2
    assert [d["name"] for d in second["spec"]["devices"]] == ["gpu-1"]


def test_a_conflict_is_read_again_and_retried() -> None:
    kube = FakeKubeApi()
    publisher = SlicePublisher(kube, "n1")
    name = _publish(kube, publisher, GPUS)["metadata"]["name"]
    real = kube.replace_resource_slice
    calls: list[str] = []

    def racing(slice_name: str, body: dict[str, Any]) -> dict[str, Any]:
        if not calls:  # someone else wrote the slice between our read and our write
            calls.append("raced")
            other = kube.list_resource_slices()[0]
            other["metadata"].pop("resourceVersion")
            real(slice_name, other)
        return real(slice_name, body)

    kube.replace_resource_slice = racing  # type: ignore[method-assign]
    written = _publish(kube, publisher, GPUS[:1])
    assert calls == ["raced"] and written["metadata"]["name"] == name and kube.conflicts == 1


def test_extra_slices_of_the_node_are_deleted_and_others_left() -> None:
    kube = FakeKubeApi()
    for node, driver in (("n1", DRA_DRIVER), ("n1", DRA_DRIVER), ("n2", DRA_DRIVER), ("n1", "gpu.nvidia.com")):
        spec = slice_spec(node, GPUS, PoolPolicy(), LABELS, 1) | {"driver": driver}
        kube.create_resource_slice(slice_body(node, spec))
    _publish(kube, SlicePublisher(kube, "n1"), GPUS)
    assert len(kube.list_resource_slices(node_name="n1", driver=DRA_DRIVER)) == 1
    assert len(kube.list_resource_slices()) == 3


def test_an_api_server_without_consumable_capacity_does_not_make_the_slice_churn() -> None:
    kube = FakeKubeApi(dra_consumable_capacity=False)  # 1.34 with default gates
    publisher = SlicePublisher(kube, "n1")
    first = _publish(kube, publisher, GPUS)
    assert "allowMultipleAllocations" not in first["spec"]["devices"][0]
    assert "requestPolicy" not in first["spec"]["devices"][0]["capacity"]["cores"]
    _publish(kube, publisher, GPUS)
    assert publisher.writes == 1


def test_withdraw_deletes_the_nodes_slices() -> None:
    kube = FakeKubeApi()
    publisher = SlicePublisher(kube, "n1")
    _publish(kube, publisher, GPUS)
    publisher.withdraw()
    assert kube.list_resource_slices() == []


def test_the_plugin_publishes_no_devices_on_a_pool_it_does_not_serve() -> None:
    from dra_harness import DraNode

    node = DraNode(pool_kind="nvidia")
    try:
        node.start_plugin()
        (body,) = node.slices()
        assert body["spec"]["devices"] == []
    finally:
        node.close()
