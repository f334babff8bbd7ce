"""NodePrepareResources / NodeUnprepareResources through the plugin's real socket, as kubelet 1.34
and 1.36 call them: the container's CDI edits, idempotence, release, and clear errors."""
from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from dra_harness import NODE, DraNode, Grant

from tessera.model.allocation_record import container_env
from tessera.model.contract import GpuShare
from tessera_node.dra.api.dra.v1 import api_pb2 as v1
from tessera_node.dra.api.dra.v1 import api_pb2_grpc as v1_grpc
from tessera_node.dra.api.dra.v1beta1 import api_pb2 as v1beta1
from tessera_node.dra.api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from tessera_node.registry import ContainerKey
from tessera_node.testing.kubelet_dra import KUBELET_1_34, KUBELET_1_36, KubeletDraError


@pytest.fixture(params=[KUBELET_1_34, KUBELET_1_36], ids=lambda v: f"kubelet-{v.name}")
def vnode(request: pytest.FixtureRequest) -> Iterator[DraNode]:
    harness = DraNode(version=request.param)
    harness.start_plugin()
    harness.start_kubelet()
    yield harness
    harness.close()


def test_a_shared_claim_gets_the_device_plugin_routes_env_and_the_mps_mount(vnode: DraNode) -> None:
    claim = vnode.claim("c1", [Grant(NODE, 1, 30, 4096)], pod="w")
    results = vnode.prepare(claim)
    uid = claim[2]
    ((names, pool, device, ids),) = results[uid].devices
    assert (names, pool, device, ids) == ((), NODE, "gpu-1", (f"tessera.dev/gpu={uid}",))
    seen = vnode.container(results, uid)
    gpu = vnode.backend.list_gpus()[1]
    # 1.34 (DRAConsumableCapacity off by default): the device comes whole; 1.36: the consumed share
    share = GpuShare(1, gpu.uuid, 30, 4096) if vnode.version.consumable_capacity else GpuShare(1, gpu.uuid, 100, gpu.memory_mib)
    expected = container_env((share,), {1: gpu.memory_mib}, mps=True, sm_counts={1: gpu.sm_count})
    assert {k: seen.env[k] for k in expected} == expected
    assert seen.env["TESSERA_SHARING_POLICY"] == "fixed-share" and seen.env["TESSERA_DRA_CLAIM"] == "default/c1"
    assert seen.mounts == (("/run/tessera/mps", "/run/tessera/mps"),)
    (record,) = vnode.registry.all()
    assert (record.pod_name, record.container, record.shares) == ("w", "main", (share,))


def test_prepare_is_idempotent_and_unprepare_releases_everything(vnode: DraNode) -> None:
    claim = vnode.claim("c1", [Grant(NODE, 0, 50, 2048)], pod="w")
    first = vnode.prepare(claim)
    vnode.kube.delete_resource_claim("default", "c1")  # a repeat is answered from what was prepared
    assert vnode.prepare(claim) == first
    assert len(vnode.cdi_files()) == 1 and len(vnode.registry.all()) == 1
    assert vnode.kubelet.node_unprepare([claim]) == {claim[2]: ""}
    assert vnode.cdi_files() == [] and vnode.registry.all() == []
    assert vnode.plugin is not None and vnode.plugin.prepared_claims() == []
    assert vnode.kubelet.node_unprepare([claim]) == {claim[2]: ""}  # unknown claims unprepare fine


def test_a_missing_cdi_spec_is_written_again_on_a_repeated_prepare(node: DraNode) -> None:
    claim = node.claim("c1", [Grant(NODE, 0, 50, 2048)], pod="w")
    node.prepare(claim)
    for spec in node.settings.cdi.cdi_dir.glob("*.json"):
        spec.unlink()
    node.prepare(claim)
    assert len(node.cdi_files()) == 1


@pytest.mark.parametrize(
    ("grants", "edit", "error"),
    [
        ([Grant(NODE, 7, 30, 1024)], None, "device 'gpu-7' is not on this node (it has gpu-0, gpu-1)"),
        ([Grant("other-node", 0, 30, 1024)], None, "device gpu-0 is in pool 'other-node', not this node's pool 'gpu-node-1'"),
        ([Grant(NODE, 0, 150, 1024)], None, "consumes 150 cores; the device has 100"),
        ([Grant(NODE, 0, 30, 999_999)], None, "consumes 999999Mi of memory; the device has 15360Mi"),
        ([Grant(NODE, 0, 30, 1024)], lambda c: c["status"].pop("allocation"), "not allocated (no status.allocation)"),
        ([Grant(NODE, 0, 30, 1024)], lambda c: c["status"]["allocation"]["devices"]["results"][0].update(driver="gpu.nvidia.com"), "no device of driver gpu.tessera.dev"),
        ([Grant(NODE, 0, 30, 1024)], lambda c: c["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"].update(cores="lots"), "consumedCapacity: 'lots' is not a quantity"),
        ([Grant(NODE, 0, 30, 1024)], lambda c: c["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"].update(sms="3"), "unknown capacity sms"),
    ],
)
def test_a_claim_the_node_cannot_serve_is_refused_with_a_clear_error(node: DraNode, grants, edit, error) -> None:  # type: ignore[no-untyped-def]
    ns, name, _ = node.claim("c1", grants)
    body = node.kube.get_resource_claim(ns, name)
    if edit is not None:
        edit(body)
        node.kube.put_resource_claim(body)
    uid = body["metadata"]["uid"]
    results = node.kubelet.node_prepare([(ns, name, uid)])
    assert error in results[uid].error and results[uid].error.startswith(f"claim default/c1 (uid {uid}): ")
    assert results[uid].devices == []
    assert node.cdi_files() == [] and node.registry.all() == []
    with pytest.raises(KubeletDraError, match="NodePrepareResources failed for ResourceClaim default/c1: claim default/c1"):
        node.prepare((ns, name, uid))


def test_a_replaced_claim_is_refused(node: DraNode) -> None:
    ns, name, _ = node.claim("c1", [Grant(NODE, 0, 30, 1024)])
    results = node.kubelet.node_prepare([(ns, name, "an-old-uid")])
    assert "the claim was replaced" in results["an-old-uid"].error


def test_one_bad_claim_does_not_fail_the_others(node: DraNode) -> None:
    good = node.claim("good", [Grant(NODE, 0, 30, 1024)], pod="a")
    results = node.kubelet.node_prepare([good, ("default", "gone", "uid-gone"), ("", "", "uid-empty")])
    assert results[good[2]].error == "" and results[good[2]].devices
    assert results["uid-gone"].error == "claim default/gone (uid uid-gone): no such ResourceClaim"
    assert results["uid-empty"].error == "claim / (uid uid-empty): claim namespace is empty; claim name is empty"


@pytest.mark.parametrize(("api", "api_grpc"), [(v1, v1_grpc), (v1beta1, v1beta1_grpc)], ids=["v1", "v1beta1"])
@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ([("default", "c", "")], "claims[0] (default/c): claim uid is empty; the response is keyed by uid"),
        ([("default", "a", "u1"), ("default", "b", "u1")], "claims[1] (default/b): uid u1 appears twice in one request"),
    ],
)
def test_malformed_requests_are_invalid_argument_in_both_versions(node: DraNode, api, api_grpc, claims, message) -> None:  # type: ignore[no-untyped-def]
    with grpc.insecure_channel(f"unix://{node.settings.dra_socket}") as channel:
        stub = api_grpc.DRAPluginStub(channel)
        for call, request in ((stub.NodePrepareResources, api.NodePrepareResourcesRequest), (stub.NodeUnprepareResources, api.NodeUnprepareResourcesRequest)):
            with pytest.raises(grpc.RpcError) as info:
                call(request(claims=[api.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims]), timeout=5)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert info.value.details() == message


def test_a_bug_reaches_kubelet_as_the_claims_error_not_a_traceback(node: DraNode, monkeypatch: pytest.MonkeyPatch) -> None:
    claim = node.claim("c1", [Grant(NODE, 0, 30, 1024)])
    assert node.plugin is not None

    def broken(*args: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(node.plugin, "_prepare_new", broken)
    results = node.kubelet.node_prepare([claim])
    assert results[claim[2]].error == f"claim default/c1 (uid {claim[2]}): internal error: RuntimeError: disk on fire"


def test_a_container_may_use_one_tessera_claim(node: DraNode) -> None:
    first = node.claim("c1", [Grant(NODE, 0, 30, 1024)], pod="w")
    node.prepare(first)
    pod = node.kube.get_pod("default", "w")
    body = node.kube.get_resource_claim("default", "c1")
    body["metadata"].update(name="c2", uid="uid-c2")
    node.kube.put_resource_claim(body)
    pod_claims = pod["spec"]["resourceClaims"]
    assert pod_claims == [{"name": "gpu", "resourceClaimName": "c1"}]
    # the same pod (same uid) also names c2, for the same container
    node.kube.delete_pod("default", "w")
    pod["spec"]["resourceClaims"].append({"name": "gpu2", "resourceClaimName": "c2"})
    pod["spec"]["containers"][0]["resources"]["claims"].append({"name": "gpu2"})
    pod["metadata"].pop("resourceVersion", None)
    node.kube.create_pod(pod)
    results = node.kubelet.node_prepare([("default", "c2", "uid-c2")])
    assert "container main of pod default/w already uses claim default/c1; one gpu.tessera.dev claim per container" in results["uid-c2"].error
    assert [r.key for r in node.registry.all()] == [ContainerKey(pod["metadata"]["uid"], "main")]  # type: ignore[arg-type]
