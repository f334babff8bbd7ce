"""The real adapter against a stub API server on loopback: what goes over the wire, and how
API errors come back (409 -> Conflict, 404 -> NotFound, watch ERROR -> KubeApiError)."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tessera.kube.api import Conflict, KubeApi, KubeApiError, NotFound
from tessera.kube.client import ClientSettings, KubernetesClientApi

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "5", "annotations": {"a": "1"}}}


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}


class StubApiServer:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length)) if length else None

            def do_GET(self) -> None:  # noqa: N802
                stub.requests.append(("GET", self.path, "", None))
                path = self.path.split("?")[0]
                if path == "/api/v1/namespaces/default/pods/p":
                    self._reply(200, POD)
                elif path == "/api/v1/pods" and "watch=true" in self.path:
                    lines = [
                        {"type": "ADDED", "object": POD},
                        {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}}},
                        {"type": "ERROR", "object": _status(410, "Expired", "too old resource version")},
                    ]
                    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif path == "/api/v1/pods":
                    self._reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}, "items": [POD]})
                else:
                    self._reply(404, _status(404, "NotFound", f'pods "{path.rsplit("/", 1)[-1]}" not found'))

            def do_PATCH(self) -> None:  # noqa: N802
                body = self._body()
                stub.requests.append(("PATCH", self.path, self.headers.get("Content-Type", ""), body))
                if body["metadata"].get("resourceVersion") not in (None, "5"):
                    self._reply(409, _status(409, "Conflict", "the object has been modified"))
                    return
                pod = json.loads(json.dumps(POD))
                pod["metadata"]["annotations"].update({k: v for k, v in body["metadata"]["annotations"].items() if v is not None})
                self._reply(200, pod)

            def do_POST(self) -> None:  # noqa: N802
                body = self._body()
                stub.requests.append(("POST", self.path, self.headers.get("Content-Type", ""), body))
                if self.path.endswith("/binding"):
                    self._reply(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
                elif self.path == "/api/v1/namespaces/default/pods/guarded/eviction":
                    self._reply(429, _status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."))
                elif self.path.endswith("/eviction"):
                    self._reply(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
                else:
                    self._reply(409, _status(409, "AlreadyExists", 'configmaps "cm" already exists'))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[StubApiServer]:
    server = StubApiServer()
    yield server
    server.close()


@pytest.fixture
def api(stub: StubApiServer, tmp_path: Path) -> KubeApi:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": stub.url}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "other", "context": {"cluster": "stub", "user": "me"}}],
                "current-context": "missing",
            }
        )
    )
    return KubernetesClientApi.connect(ClientSettings(kubeconfig=str(kubeconfig), context="other"))


def test_reads_return_api_json_with_camel_case_keys(api: KubeApi) -> None:
    assert api.get_pod("default", "p")["metadata"]["resourceVersion"] == "5"
    pods, version = api.list_pods_and_version()
    assert version == "42" and pods[0]["metadata"]["uid"] == "u1"


def test_annotation_patch_is_a_merge_patch_carrying_the_resource_version(api: KubeApi, stub: StubApiServer) -> None:
    api.patch_pod_annotations("default", "p", {"b": "2", "a": None}, resource_version="5")
    method, path, content_type, body = stub.requests[-1]
    assert (method, path, content_type) == ("PATCH", "/api/v1/namespaces/default/pods/p", "application/merge-patch+json")
    assert body == {"metadata": {"annotations": {"b": "2", "a": None}, "resourceVersion": "5"}}
    with pytest.raises(Conflict):
        api.patch_pod_annotations("default", "p", {"b": "3"}, resource_version="4")


def test_binding_names_pod_uid_and_node(api: KubeApi, stub: StubApiServer) -> None:
    api.bind_pod("default", "p", "u1", "node-7")
    method, path, _, body = stub.requests[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/default/pods/p/binding")
    assert body["metadata"]["uid"] == "u1" and body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "node-7"}


def test_eviction_is_a_policy_v1_eviction_carrying_the_uid_precondition(api: KubeApi, stub: StubApiServer) -> None:
    api.evict_pod("default", "p", "u1")
    method, path, _, body = stub.requests[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/default/pods/p/eviction")
    assert (body["apiVersion"], body["kind"]) == ("policy/v1", "Eviction")
    assert body["metadata"] == {"name": "p", "namespace": "default"}
    assert body["deleteOptions"]["preconditions"] == {"uid": "u1"}


def test_eviction_held_by_a_disruption_budget_is_a_429_to_retry(api: KubeApi) -> None:
    with pytest.raises(KubeApiError) as info:
        api.evict_pod("default", "guarded")
    assert info.value.status == 429 and "disruption budget" in info.value.message


@pytest.mark.parametrize(
    ("call", "error", "fragment"),
    [
        (lambda api: api.get_pod("default", "missing"), NotFound, 'pods "missing" not found'),
        (lambda api: api.create_configmap("default", {"metadata": {"name": "cm"}}), Conflict, "already exists"),
    ],
)
def test_api_errors_map_to_typed_exceptions_with_the_server_message(api: KubeApi, call: Any, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        call(api)
    assert fragment in str(info.value)


def test_watch_yields_objects_skips_bookmarks_and_raises_gone(api: KubeApi) -> None:
    stream = api.watch_pods(resource_version="40", stop_after_s=5)
    first = next(stream)
    assert first.type == "ADDED" and first.object["metadata"]["uid"] == "u1"
    with pytest.raises(KubeApiError) as info:
        next(stream)
    assert info.value.status == 410


def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeApiError) as info:
        KubernetesClientApi.connect(ClientSettings(kubeconfig=str(tmp_path / "nope"), context=None))
    assert "--kubeconfig" in info.value.message
