"""The extender over real HTTP, driven like kube-scheduler drives it (S2 scenarios, wire format)."""
from __future__ import annotations

import json
import socket

import pytest
from extender_harness import GIB, Harness, node_manifest, pod_manifest, wait_until
from kube_scheduler_emulator import ExtenderClient

from tessera.alloc import PlacementPolicy
from tessera.model.contract import ALLOCATION_ENV_KEYS, ANNOTATION_ALLOCATION, ANNOTATION_GPU_INDEX_PREFIX, LABEL_SHARING_POLICY, Allocation


def _allocation(harness: Harness, name: str) -> Allocation:
    return Allocation.from_json(harness.api.get_pod("default", name)["metadata"]["annotations"][ANNOTATION_ALLOCATION])


@pytest.mark.parametrize("node_cache_capable", [True, False], ids=["NodeNames", "Nodes"])
@pytest.mark.parametrize(
    ("placement", "same_gpu"),
    [("binpack", True), ("spread", False)],
)
def test_s2_two_shares_land_per_gpu_placement(harness: Harness, node_cache_capable: bool, placement: str, same_gpu: bool) -> None:
    harness.api.create_node(node_manifest("gpu-node", gpus=2, placement=placement))
    service = harness.start()
    scheduler = harness.scheduler(service, node_cache_capable=node_cache_capable)
    for name, core in (("job-40", 40), ("job-30", 30)):
        harness.api.create_pod(pod_manifest(name, ("main", core, 5 * GIB)))
        attempt = scheduler.schedule("default", name)
        assert attempt.node == "gpu-node", attempt
    first, second = _allocation(harness, "job-40"), _allocation(harness, "job-30")
    same = first.containers["main"][0].index == second.containers["main"][0].index
    assert same is same_gpu
    assert harness.api.get_pod("default", "job-30")["spec"]["nodeName"] == "gpu-node"


def test_whole_gpu_request_gets_a_gpu_to_itself(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1", gpus=2))
    service = harness.start()
    scheduler = harness.scheduler(service)
    harness.api.create_pod(pod_manifest("whole", ("main", 100, None)))
    assert scheduler.schedule("default", "whole").node == "n1"
    share = _allocation(harness, "whole").containers["main"][0]
    assert (share.core, share.memory_mib) == (100, 16 * GIB)
    harness.api.create_pod(pod_manifest("half", ("main", 50, 10 * GIB)))
    assert scheduler.schedule("default", "half").node == "n1"
    # kube-scheduler's node sums pass (190 of 200 gpu-core, 20 of 32 GiB: the whole GPU asked for
    # no gpu-memory), but no GPU has 40 % and 10 GiB free: the whole GPU takes no share
    harness.api.create_pod(pod_manifest("more", ("main", 40, 10 * GIB)))
    attempt = scheduler.schedule("default", "more")
    assert attempt.node is None
    assert "GPU" in attempt.failed["n1"]


def test_pod_that_fits_nowhere_gets_reasons_per_node(harness: Harness) -> None:
    harness.api.create_node(node_manifest("small", gpus=3, placement="spread"))
    service = harness.start()
    scheduler = harness.scheduler(service)
    for name in ("s1", "s2"):  # one share on each of two GPUs: one GPU stays idle
        harness.api.create_pod(pod_manifest(name, ("main", 30, None)))
        assert scheduler.schedule("default", name).node == "small"
    harness.api.create_node(node_manifest("a100", gpus=2, model="A100"))
    # advertises gpu-core but has no Tessera inventory (its node agent has not published it yet)
    without_inventory = node_manifest("cpu-only", gpus=2)
    del without_inventory["metadata"]["annotations"]
    harness.api.create_node(without_inventory)
    assert wait_until(lambda: service.state.summary()[0] == 2)
    # kube-scheduler's own sums pass everywhere (240 % free on "small"); only the extender can tell
    harness.api.create_pod(pod_manifest("big", ("main", 200, None), annotations={"tessera.dev/gpu-models": "T4"}))
    attempt = scheduler.schedule("default", "big")
    assert attempt.node is None
    assert set(attempt.failed) == {"small"} and "GPU" in attempt.failed["small"]
    assert set(attempt.unresolvable) == {"a100", "cpu-only"}
    assert "model" in attempt.unresolvable["a100"] and "tessera.dev/gpus" in attempt.unresolvable["cpu-only"]
    assert "nodeName" not in harness.api.get_pod("default", "big")["spec"]


def test_invalid_request_is_unresolvable_with_a_message_not_an_error(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1"))
    service = harness.start()
    scheduler = harness.scheduler(service)
    harness.api.create_pod(pod_manifest("odd", ("main", 150, None)))
    attempt = scheduler.schedule("default", "odd")
    assert attempt.node is None and not attempt.error
    assert "multiple of 100" in attempt.unresolvable["n1"]


def test_bind_writes_configmap_annotations_and_binding(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1", gpus=3, labels={LABEL_SHARING_POLICY: "fixed-share"}))
    service = harness.start()
    scheduler = harness.scheduler(service)
    pod = pod_manifest("multi", ("train", 50, 4 * GIB), ("sidecar", 0, None), ("infer", 200, None))
    pod["metadata"]["annotations"]["tessera.dev/allocation-configmap"] = "tessera-alloc-abc"
    uid = harness.api.create_pod(pod)["metadata"]["uid"]
    assert scheduler.schedule("default", "multi").node == "n1"
    stored = harness.api.get_pod("default", "multi")
    allocation = Allocation.from_json(stored["metadata"]["annotations"][ANNOTATION_ALLOCATION])
    assert {k: v for k, v in stored["metadata"]["annotations"].items() if k in allocation.pod_annotations()} == allocation.pod_annotations()
    assert set(allocation.containers) == {"train", "infer"}
    infer_indices = {int(i) for i in stored["metadata"]["annotations"][ANNOTATION_GPU_INDEX_PREFIX + "infer"].split(",")}
    assert len(infer_indices) == 2 and allocation.containers["train"][0].index not in infer_indices
    cm = harness.api.get_configmap("default", "tessera-alloc-abc")
    assert cm["metadata"]["ownerReferences"][0]["uid"] == uid
    assert set(cm["data"]) == {f"{c}.{k}" for c in ("train", "infer") for k in ALLOCATION_ENV_KEYS}
    train = allocation.containers["train"][0]
    assert cm["data"]["train.NVIDIA_VISIBLE_DEVICES"] == train.uuid
    assert cm["data"]["train.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={4 * GIB}M"
    assert cm["data"]["train.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert cm["data"]["train.CUDA_MPS_PIPE_DIRECTORY"] == f"/run/tessera/mps/{train.uuid}/pipe"
    assert cm["data"]["infer.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={16 * GIB}M,1={16 * GIB}M"
    assert cm["data"]["infer.TESSERA_GPU_CORE"] == "200"


@pytest.mark.parametrize("sm_count, core, percentage", [(None, 60, "60"), (132, 60, "61"), (132, 30, "31"), (132, 50, "50"), (108, 30, "30"), (108, 25, "26"), (40, 60, "60")])
def test_mps_percentage_in_the_configmap_rounds_to_whole_tpcs_of_the_reported_sms(harness: Harness, sm_count: int | None, core: int, percentage: str) -> None:
    """60 % of an H100 (132 SMs) is 79.2 SMs: MPS gives 78 for 60 (it rounds down to TPCs) and 80
    for 61, the nearest; a node that reports no SM count keeps the plain percent."""
    harness.api.create_node(node_manifest("n1", gpus=1, labels={LABEL_SHARING_POLICY: "fixed-share"}, sm_count=sm_count))
    service = harness.start()
    scheduler = harness.scheduler(service)
    pod = pod_manifest("job", ("main", core, None))
    pod["metadata"]["annotations"]["tessera.dev/allocation-configmap"] = "tessera-alloc-job"
    harness.api.create_pod(pod)
    assert scheduler.schedule("default", "job").node == "n1"
    assert harness.api.get_configmap("default", "tessera-alloc-job")["data"]["main.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == percentage


def test_an_sm_count_published_later_is_used_for_the_next_pod(harness: Harness) -> None:
    """A device plugin of the previous release publishes no smCount; once the upgraded one does,
    the next pod's percentage is rounded (no re-add of the node, the pods on it stay)."""
    harness.api.create_node(node_manifest("n1", gpus=1, labels={LABEL_SHARING_POLICY: "fixed-share"}))
    service = harness.start()
    scheduler = harness.scheduler(service)
    for name in ("before", "after"):
        if name == "after":
            upgraded = node_manifest("n1", gpus=1, sm_count=132)["metadata"]["annotations"]
            harness.api.patch_node_annotations("n1", upgraded)
            assert wait_until(lambda: service.state.cluster.nodes["n1"].gpus[0].sm_count == 132)
        pod = pod_manifest(name, ("main", 30, None))
        pod["metadata"]["annotations"]["tessera.dev/allocation-configmap"] = f"tessera-alloc-{name}"
        harness.api.create_pod(pod)
        assert scheduler.schedule("default", name).node == "n1"
    data = {n: harness.api.get_configmap("default", f"tessera-alloc-{n}")["data"]["main.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] for n in ("before", "after")}
    assert data == {"before": "30", "after": "31"}
    assert sum(p.node == "n1" for p in service.state.cluster.allocated().values()) == 2, "the first pod's share survived the inventory update"


def test_wire_keys_are_go_field_names(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1"))
    service = harness.start()
    client = harness.client(service)
    pod = harness.api.create_pod(pod_manifest("p", ("main", 10, None)))
    status, body = client.post("filter", {"Pod": pod, "NodeNames": ["n1", "ghost"]})
    assert status == 200
    assert set(body) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert body["NodeNames"] == ["n1"] and body["Nodes"] is None and body["Error"] == ""
    status, body = client.post("filter", {"Pod": pod, "Nodes": {"items": [harness.api.get_node("n1")]}})
    assert body["NodeNames"] is None and [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["n1"]
    status, prios = client.post("prioritize", {"Pod": pod, "NodeNames": ["n1"]})
    assert prios == [{"Host": "n1", "Score": 10}]
    meta = pod["metadata"]
    status, body = client.post("bind", {"PodName": "p", "PodNamespace": "default", "PodUID": meta["uid"], "Node": "n1"})
    assert (status, body) == (200, {"Error": ""})


def test_scores_are_0_to_10_with_one_best_node(harness: Harness) -> None:
    harness.policy = PlacementPolicy.BINPACK
    for name in ("n1", "n2", "n3"):
        harness.api.create_node(node_manifest(name, gpus=2))
    service = harness.start()
    scheduler = harness.scheduler(service)
    harness.api.create_pod(pod_manifest("first", ("main", 60, None)))
    assert scheduler.schedule("default", "first").node is not None
    harness.api.create_pod(pod_manifest("second", ("main", 30, None)))
    attempt = scheduler.schedule("default", "second")
    assert all(0 <= s <= 10 for s in attempt.scores.values())
    assert sorted(attempt.scores.values()).count(10) == 1
    assert attempt.node == _allocation(harness, "first").node  # binpack: onto the used node


@pytest.mark.parametrize(
    ("body", "fragment", "path"),
    [
        (b"{not json", "not valid JSON", None),
        (b"[1, 2]", "must be a JSON object", None),
        (b"{}", "Pod: is required", "Pod"),
        (json.dumps({"Pod": {"metadata": {}}, "NodeNames": "n1"}).encode(), "must be an array", "NodeNames"),
        (json.dumps({"Pod": {"metadata": {}}, "Nodes": {"items": [{}]}}).encode(), "is required", "Nodes.items[0].metadata.name"),
        (b"\xff\xfe", "not UTF-8", None),
    ],
)
def test_malformed_bodies_get_400_and_the_server_keeps_serving(harness: Harness, body: bytes, fragment: str, path: str | None) -> None:
    harness.api.create_node(node_manifest("n1"))
    service = harness.start()
    client = harness.client(service)
    status, raw = client.post_raw("/filter", body)
    assert status == 400
    reply = json.loads(raw)
    assert fragment in reply["error"] and reply["path"] == path
    status, raw = client.post_raw("/bind", b'{"PodName": 3}')
    assert status == 400 and json.loads(raw)["path"] == "PodName"
    status, raw = client.post_raw("/preempt", b'{"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"n1": {"Pods": [{}]}}}')
    assert status == 400 and json.loads(raw)["path"] == 'NodeNameToMetaVictims["n1"].Pods[0].UID'
    pod = harness.api.create_pod(pod_manifest("ok", ("main", 10, None)))
    status, result = client.post("filter", {"Pod": pod, "NodeNames": ["n1"]})
    assert status == 200 and result["NodeNames"] == ["n1"]


def test_oversized_body_gets_413_and_the_server_keeps_serving(harness: Harness) -> None:
    harness.max_body_bytes = 4096
    harness.api.create_node(node_manifest("n1"))
    service = harness.start()
    client = harness.client(service)
    status, raw = client.post_raw("/filter", b"{" + b" " * 10_000 + b"}")
    assert status == 413 and b"exceeds the limit" in raw
    # a client announcing a huge body is refused before anything is read
    with socket.create_connection(("127.0.0.1", service.port), timeout=5) as sock:
        sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 413")
    fresh = ExtenderClient("127.0.0.1", service.port)
    pod = harness.api.create_pod(pod_manifest("ok", ("main", 10, None)))
    status, result = fresh.post("filter", {"Pod": pod, "NodeNames": ["n1"]})
    fresh.close()
    assert status == 200 and result["NodeNames"] == ["n1"]


def test_health_metrics_and_unknown_paths(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1"))
    service = harness.start()
    client = harness.client(service)
    status, text = client.get("/healthz")
    assert status == 200 and "1 nodes" in text
    client.post_raw("/filter", b"nope")
    status, _ = client.post("nope", {})
    assert status == 404
    status, text = client.get("/metrics")
    assert status == 200
    assert 'tessera_extender_requests_total{code="400",verb="filter"} 1.0' in text
    assert "tessera_extender_request_seconds_bucket" in text
    assert "tessera_extender_gpus 2.0" in text


def test_url_prefix_is_accepted(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1"))
    service = harness.start()
    client = harness.client(service)
    pod = harness.api.create_pod(pod_manifest("p", ("main", 10, None)))
    status, raw = client.post_raw("/tessera/v1/filter", json.dumps({"Pod": pod, "NodeNames": ["n1"]}).encode())
    assert status == 200 and json.loads(raw)["NodeNames"] == ["n1"]


@pytest.mark.parametrize("how", ["delete", "succeed", "fail"])
def test_finished_or_deleted_pods_free_their_share(harness: Harness, how: str) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1))
    service = harness.start()
    scheduler = harness.scheduler(service)
    harness.api.create_pod(pod_manifest("holder", ("main", 100, None)))
    assert scheduler.schedule("default", "holder").node == "n1"
    harness.api.create_pod(pod_manifest("waiting", ("main", 50, None)))
    assert scheduler.schedule("default", "waiting").node is None
    if how == "delete":
        harness.api.delete_pod("default", "holder")
    else:
        harness.api.set_pod_phase("default", "holder", "Succeeded" if how == "succeed" else "Failed")
    assert wait_until(lambda: service.state.summary()[1] == 0)
    assert scheduler.schedule("default", "waiting").node == "n1"
