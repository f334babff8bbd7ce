"""The loopback API server answers as the Kubernetes API server does: status codes, `Status`
bodies word for word (k8s.io/apimachinery pkg/api/errors/errors.go; store.go's optimistic-lock
cause; pod storage's binding conflict), list resourceVersions, chunked watch streams with the
watch cache's 410 ERROR event, and the Lease verbs through the real client."""
from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from json_api_stand_in import Loopback, loopback_api

from tessera.kube.api import Conflict, NotFound
from tessera.kube.fake import FakeKubeApi

OPTIMISTIC = "the object has been modified; please apply your changes to the latest version and try again"


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None) -> dict[str, Any]:
    found: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason}
    if details is not None:
        found["details"] = details
    found["code"] = code
    return found


def http_call(
    loop: Loopback, method: str, path: str, body: Any = None, content_type: str = "application/json", *, decode: bool = True
) -> tuple[int, http.client.HTTPMessage, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", int(loop.server.url.rsplit(":", 1)[1]), timeout=10)
    try:
        data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
        connection.request(method, path, body=data, headers={"Content-Type": content_type} if data is not None else {})
        response = connection.getresponse()
        raw = response.read()
        decodes = decode and raw and "json" in (response.headers.get("Content-Type") or "")
        return response.status, response.headers, json.loads(raw) if decodes else raw
    finally:
        connection.close()


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loopback]:
    fake = FakeKubeApi()
    fake.create_node({"metadata": {"name": "n1", "labels": {"pool": "a"}}})
    fake.create_pod({"metadata": {"name": "p", "namespace": "default", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}})
    fake.create_configmap("default", {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    with loopback_api(tmp_path, fake) as served:
        yield served
        assert served.server.internal_errors() == []


BINDING = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": "default"}, "target": {"kind": "Node", "name": "n1"}}


@pytest.mark.parametrize(
    ("method", "path", "body", "code", "expected"),
    [
        ("GET", "/api/v1/namespaces/default/pods/missing", None, 404,
         _status(404, "NotFound", 'pods "missing" not found', {"name": "missing", "kind": "pods"})),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/l", None, 404,
         _status(404, "NotFound", 'leases.coordination.k8s.io "l" not found', {"name": "l", "group": "coordination.k8s.io", "kind": "leases"})),
        ("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "cm"}}, 409,
         _status(409, "AlreadyExists", 'configmaps "cm" already exists', {"name": "cm", "kind": "configmaps"})),
        ("PATCH", "/api/v1/namespaces/default/pods/p", {"metadata": {"resourceVersion": "1", "annotations": {"a": "b"}}}, 409,
         _status(409, "Conflict", f'Operation cannot be fulfilled on pods "p": {OPTIMISTIC}', {"name": "p", "kind": "pods"})),
        ("GET", "/api/v1/namespaces/default/secrets/s", None, 404,
         _status(404, "NotFound", "the server could not find the requested resource", {})),
        ("PUT", "/api/v1/namespaces/default/configmaps/cm", {"metadata": {"name": "cm", "namespace": "other"}}, 400,
         _status(400, "BadRequest", "the namespace of the object (other) does not match the namespace on the request (default)", None)),
        ("POST", "/api/v1/namespaces/default/pods/p/binding", {**BINDING, "metadata": {"name": "q"}}, 400,
         _status(400, "BadRequest", "name in URL does not match name in Binding object", None)),
    ],
    ids=["pod not found", "lease not found", "configmap exists", "stale patch", "unknown resource", "namespace differs", "binding name"],
)
def test_errors_answer_upstream_status_bodies(loop: Loopback, method: str, path: str, body: Any, code: int, expected: dict[str, Any]) -> None:
    status, headers, answer = http_call(loop, method, path, body, "application/merge-patch+json" if method == "PATCH" else "application/json")
    assert (status, answer) == (code, expected)
    assert headers["Content-Type"] == "application/json"


def test_a_second_binding_is_the_pod_storage_conflict(loop: Loopback) -> None:
    assert http_call(loop, "POST", "/api/v1/namespaces/default/pods/p/binding", BINDING)[:3:2] == (
        201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    status, _, answer = http_call(loop, "POST", "/api/v1/namespaces/default/pods/p/binding", BINDING)
    assert (status, answer["reason"], answer["message"]) == (
        409, "Conflict", 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"')


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "code"),
    [
        ("DELETE", "/api/v1/namespaces/default/pods/p", None, "application/json", 405),
        ("PATCH", "/api/v1/namespaces/default/pods/p", [{"op": "add"}], "application/json-patch+json", 400),
        ("PATCH", "/api/v1/namespaces/default/pods/p", {"spec": {"nodeName": "n1"}}, "application/merge-patch+json", 400),
        ("POST", "/api/v1/namespaces/default/configmaps", b"{not json", "application/json", 400),
        ("GET", "/api/v1/pods?fieldSelector=status.phase%3DRunning", None, "application/json", 400),
        ("GET", "/api/v1/pods?watch=true&resourceVersion=abc", None, "application/json", 422),
    ],
    ids=["delete", "json patch", "patch of spec", "body not json", "other field selector", "watch version not a number"],
)
def test_what_the_client_never_sends_is_a_clear_4xx(loop: Loopback, method: str, path: str, body: Any, content_type: str, code: int) -> None:
    status, _, answer = http_call(loop, method, path, body, content_type)
    assert status == code and answer["kind"] == "Status" and answer["message"]


def test_objects_lists_and_selectors_are_shaped_as_upstream(loop: Loopback) -> None:
    api = loop.client()
    pod = api.get_pod("default", "p")
    assert (pod["kind"], pod["apiVersion"]) == ("Pod", "v1")
    status, _, listed = http_call(loop, "GET", "/api/v1/pods?labelSelector=app%3Dx")
    assert status == 200 and (listed["kind"], listed["apiVersion"]) == ("PodList", "v1")
    assert listed["metadata"]["resourceVersion"] == loop.fake.resource_version
    assert [set(item) & {"kind", "apiVersion"} for item in listed["items"]] == [set()]
    assert api.list_pods(label_selector="app=y") == [] and api.list_pods(node_name="n1") == []
    api.bind_pod("default", "p", pod["metadata"]["uid"], "n1")
    assert [p["metadata"]["name"] for p in api.list_pods(node_name="n1")] == ["p"]
    assert [n["metadata"]["name"] for n in api.list_nodes(label_selector="pool=a")] == ["n1"]


def test_writes_through_the_client_land_in_the_store(loop: Loopback) -> None:
    api = loop.client()
    api.patch_node_labels("n1", {"pool": None, "zone": "z"})
    api.patch_node_annotations("n1", {"note": "x"})
    api.patch_node_status_capacity("n1", {"tessera.dev/gpu-core": "200"})
    api.replace_configmap("default", "cm", {"metadata": {"name": "cm"}, "data": {"k": "w"}})
    api.create_event("default", {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R", "message": "m"})
    node = loop.fake.get_node("n1")
    assert node["metadata"]["labels"] == {"zone": "z"} and node["metadata"]["annotations"] == {"note": "x"}
    assert node["status"]["allocatable"] == {"tessera.dev/gpu-core": "200"}
    assert loop.fake.get_configmap("default", "cm")["data"] == {"k": "w"}
    assert [e["reason"] for e in loop.fake.list_events()] == ["R"]
    api.evict_pod("default", "p", api.get_pod("default", "p")["metadata"]["uid"])
    assert loop.fake.list_pods() == []


def _watch_lines(loop: Loopback, query: str) -> tuple[int, str, list[dict[str, Any]]]:
    status, headers, raw = http_call(loop, "GET", f"/api/v1/pods?watch=true&{query}", decode=False)
    lines = [json.loads(line) for line in raw.split(b"\n") if line] if isinstance(raw, bytes) else []
    return status, headers.get("Transfer-Encoding", ""), lines


def test_a_watch_is_chunked_json_lines_that_resume_from_a_version(loop: Loopback) -> None:
    _, version = loop.fake.list_pods_and_version()
    loop.fake.patch_pod_annotations("default", "p", {"a": "1"})
    status, encoding, lines = _watch_lines(loop, f"resourceVersion={version}&timeoutSeconds=1")
    assert (status, encoding) == (200, "chunked")
    assert [(e["type"], e["object"]["kind"], e["object"]["metadata"]["annotations"]) for e in lines] == [("MODIFIED", "Pod", {"a": "1"})]
    status, _, lines = _watch_lines(loop, "timeoutSeconds=1")  # no version: the current pods first
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "p")]


def test_a_watch_from_a_compacted_version_gets_the_watch_caches_410_event(tmp_path: Path) -> None:
    fake = FakeKubeApi(history=2)
    fake.create_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": {}})
    for i in range(6):
        fake.patch_pod_annotations("default", "p", {"i": str(i)})
    with loopback_api(tmp_path, fake) as loop:
        status, _, lines = _watch_lines(loop, "resourceVersion=1&timeoutSeconds=1")
    assert status == 200 and len(lines) == 1
    assert lines[0]["type"] == "ERROR"
    assert lines[0]["object"] == _status(410, "Expired", lines[0]["object"]["message"], None)
    assert lines[0]["object"]["message"].startswith("too old resource version: 1 (")


def test_lease_verbs_through_http(loop: Loopback) -> None:
    api = loop.client()
    body = {"metadata": {"name": "tessera-extender"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 4, "renewTime": "2026-11-28T10:00:00.000000Z"}}
    with pytest.raises(NotFound) as missing:
        api.get_lease("default", "tessera-extender")
    assert missing.value.message == 'leases.coordination.k8s.io "tessera-extender" not found'
    created = api.create_lease("default", body)
    assert (created["kind"], created["apiVersion"]) == ("Lease", "coordination.k8s.io/v1")
    with pytest.raises(Conflict) as exists:
        api.create_lease("default", body)
    assert exists.value.message == 'leases.coordination.k8s.io "tessera-extender" already exists'
    taken = api.replace_lease("default", "tessera-extender", {**created, "spec": {**created["spec"], "holderIdentity": "b"}})
    with pytest.raises(Conflict) as stale:
        api.replace_lease("default", "tessera-extender", {**created, "spec": {**created["spec"], "holderIdentity": "c"}})
    assert stale.value.message == f'Operation cannot be fulfilled on leases.coordination.k8s.io "tessera-extender": {OPTIMISTIC}'
    assert api.get_lease("default", "tessera-extender") == taken and taken["spec"]["holderIdentity"] == "b"
    status, _, answer = http_call(loop, "PUT", "/apis/coordination.k8s.io/v1/namespaces/default/leases/other", {**body, "metadata": {"name": "other"}})
    assert status == 201 and answer["metadata"]["name"] == "other"
