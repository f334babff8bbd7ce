"""FakeKubeApi's ResourceSlices and ResourceClaims behave as the API server's (fake_dra cites where)."""
from __future__ import annotations

from typing import Any

import pytest

from tessera.kube.api import Conflict, KubeApiError, NotFound
from tessera.kube.fake import FakeKubeApi

SPEC: dict[str, Any] = {
    "driver": "gpu.tessera.dev", "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
    "devices": [{"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"cores": {"value": "100", "requestPolicy": {"default": "100"}}}}],
}


def _slice(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta or {"generateName": "n1-gpu.tessera.dev-"}, "spec": SPEC}


def test_generate_name_appends_five_characters_of_the_api_servers_alphabet() -> None:
    kube = FakeKubeApi()
    names = {kube.create_resource_slice(_slice())["metadata"]["name"] for _ in range(5)}
    assert len(names) == 5
    for name in names:
        suffix = name.removeprefix("n1-gpu.tessera.dev-")
        assert len(suffix) == 5 and set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_create_needs_a_name_and_refuses_a_taken_one() -> None:
    kube = FakeKubeApi()
    kube.create_resource_slice(_slice(name="s"))
    with pytest.raises(Conflict, match='resourceslices.resource.k8s.io "s" already exists'):
        kube.create_resource_slice(_slice(name="s"))
    with pytest.raises(KubeApiError, match="name or generateName is required") as info:
        kube.create_resource_slice({"metadata": {}, "spec": SPEC})
    assert info.value.status == 422


def test_replace_checks_the_resource_version_and_bumps_the_generation_on_a_spec_change() -> None:
    kube = FakeKubeApi()
    created = kube.create_resource_slice(_slice(name="s"))
    stale = {**created, "metadata": {**created["metadata"], "resourceVersion": "1"}}
    changed = {**created, "spec": {**SPEC, "devices": []}}
    replaced = kube.replace_resource_slice("s", changed)
    assert replaced["metadata"]["generation"] == 2 and replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert kube.replace_resource_slice("s", {**replaced, "metadata": {"name": "s"}})["metadata"]["generation"] == 2  # unconditional, same spec
    with pytest.raises(Conflict, match="the object has been modified"):
        kube.replace_resource_slice("s", stale)
    with pytest.raises(NotFound, match='resourceslices.resource.k8s.io "t" not found'):
        kube.replace_resource_slice("t", _slice(name="t"))


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda s: s.pop("driver"), "spec.driver: Required value"),
        (lambda s: s["pool"].pop("name"), "spec.pool.name: Required value"),
        (lambda s: s.update(allNodes=True), "spec: Invalid value: {...}: exactly one of"),
        (lambda s: s.update(devices=[{"name": "GPU_0"}]), 'spec.devices[0].name: Invalid value: "GPU_0"'),
        (lambda s: s.update(devices=[{"name": "a"}, {"name": "a"}]), "duplicate device name"),
        (lambda s: s.update(devices=[{"name": f"d{i}"} for i in range(129)]), "must have at most 128 items"),
    ],
)
def test_invalid_slices_are_422_naming_the_field(edit, field: str) -> None:  # type: ignore[no-untyped-def]
    import copy

    spec = copy.deepcopy(SPEC)
    edit(spec)
    with pytest.raises(KubeApiError, match=field.replace("[", r"\[").replace("]", r"\]").replace("{", r"\{").replace("}", r"\}").replace(".", r"\.")) as info:
        FakeKubeApi().create_resource_slice({"metadata": {"name": "s"}, "spec": spec})
    assert info.value.status == 422


def test_field_selectors_and_delete() -> None:
    kube = FakeKubeApi()
    kube.create_resource_slice(_slice(name="a"))
    kube.create_resource_slice({"metadata": {"name": "b"}, "spec": {**SPEC, "nodeName": "n2"}})
    assert [s["metadata"]["name"] for s in kube.list_resource_slices(node_name="n1", driver="gpu.tessera.dev")] == ["a"]
    assert kube.list_resource_slices(driver="other") == []
    kube.delete_resource_slice("a")
    with pytest.raises(NotFound):
        kube.delete_resource_slice("a")


def test_with_the_consumable_capacity_gate_off_the_gated_fields_are_dropped() -> None:
    device = FakeKubeApi(dra_consumable_capacity=False).create_resource_slice(_slice())["spec"]["devices"][0]
    assert "allowMultipleAllocations" not in device and device["capacity"]["cores"] == {"value": "100"}
    device = FakeKubeApi().create_resource_slice(_slice())["spec"]["devices"][0]
    assert device["allowMultipleAllocations"] is True


def test_claims_are_read_as_stored_and_404_when_absent() -> None:
    kube = FakeKubeApi()
    stored = kube.put_resource_claim({"metadata": {"name": "c", "namespace": "ns"}, "status": {"allocation": {}}})
    assert kube.get_resource_claim("ns", "c") == stored and stored["metadata"]["uid"]
    with pytest.raises(NotFound, match='resourceclaims.resource.k8s.io "d" not found'):
        kube.get_resource_claim("ns", "d")


def _events(stream: Any, n: int) -> list[tuple[str, str, str]]:
    out = []
    for event in stream:
        out.append((event.type, event.object["metadata"]["name"], event.object["metadata"]["resourceVersion"]))
        if len(out) == n:
            break
    return out


def test_slices_and_claims_are_watched_like_pods_from_a_lists_version() -> None:
    kube = FakeKubeApi()
    kube.create_resource_slice(_slice(name="before"))
    slices, version = kube.list_resource_slices_and_version(driver="gpu.tessera.dev")
    assert [s["metadata"]["name"] for s in slices] == ["before"]
    kube.create_resource_slice(_slice(name="s"))
    kube.create_resource_slice({**_slice(name="other"), "spec": {**SPEC, "driver": "gpu.nvidia.com"}})
    kube.replace_resource_slice("s", {**_slice(name="s"), "spec": {**SPEC, "nodeName": "n2"}})
    kube.delete_resource_slice("s")
    seen = _events(kube.watch_resource_slices(driver="gpu.tessera.dev", resource_version=version, stop_after_s=1), 3)
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "s"), ("MODIFIED", "s"), ("DELETED", "s")]  # the other driver's is not sent
    assert len({rv for _, _, rv in seen}) == 3, "each change, the deletion included, has its own resourceVersion"

    claims, version = kube.list_resource_claims_and_version()
    assert claims == []
    kube.put_resource_claim({"metadata": {"name": "c", "namespace": "ml"}, "spec": {}})
    kube.put_resource_claim({"metadata": {"name": "c", "namespace": "ml"}, "spec": {}, "status": {"allocation": {}}})
    kube.delete_resource_claim("ml", "c")
    assert [(t, n) for t, n, _ in _events(kube.watch_resource_claims(resource_version=version, stop_after_s=1), 3)] == [("ADDED", "c"), ("MODIFIED", "c"), ("DELETED", "c")]


def test_a_watch_without_a_version_starts_with_the_current_objects() -> None:
    kube = FakeKubeApi()
    kube.create_resource_slice(_slice(name="s"))
    kube.put_resource_claim({"metadata": {"name": "c"}, "spec": {}})
    assert [(t, n) for t, n, _ in _events(kube.watch_resource_slices(stop_after_s=1), 1)] == [("ADDED", "s")]
    assert [(t, n) for t, n, _ in _events(kube.watch_resource_claims(stop_after_s=1), 1)] == [("ADDED", "c")]
