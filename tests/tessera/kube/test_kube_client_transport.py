"""Failures without an HTTP answer reach callers as `TransportError` naming the call, and no request
is sent twice: driven through the real client against raw sockets that misbehave on purpose."""
from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tessera.kube.api import KubeApi, KubeApiError, TransportError, may_have_applied
from tessera.kube.client import ClientSettings, KubernetesClientApi

Behaviour = Callable[[socket.socket, bytes], None]
LEASE = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {"name": "tessera-extender", "namespace": "ns", "resourceVersion": "7"},
    "spec": {"holderIdentity": "a", "leaseDurationSeconds": 4, "renewTime": "2026-11-28T10:00:00.000000Z", "acquireTime": "2026-11-28T10:00:00.000000Z"},
}


class RawServer:
    """Accepts connections on 127.0.0.1, reads each request whole and hands it to `behaviour`."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[bytes] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        self.requests.append(head + b"\r\n\r\n" + body)
        self.behaviour(conn, body)

    def close(self) -> None:
        self._sock.close()
        for conn in self._open:
            conn.close()


def close_quietly(conn: socket.socket, _: bytes) -> None:
    conn.close()


def reset(conn: socket.socket, _: bytes) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def never_answer(conn: socket.socket, _: bytes) -> None:
    threading.Event().wait(5)


def cut_short(conn: socket.socket, _: bytes) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"kind\":")
    conn.close()


def not_json(conn: socket.socket, _: bytes) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 6\r\n\r\n<html>")


def busy_503(conn: socket.socket, _: bytes) -> None:
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "busy", "reason": "ServiceUnavailable", "code": 503}).encode()
    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def watch_then_break(conn: socket.socket, _: bytes) -> None:
    event = json.dumps({"type": "ADDED", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "resourceVersion": "3"}}}).encode() + b"\n"
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(event), event))
    conn.close()


def answer_lease(conn: socket.socket, body: bytes) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def connect(port: int, tmp_path: Path, timeout_s: float = 0.5) -> KubeApi:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "raw",
        "clusters": [{"name": "raw", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "raw", "user": {}}],
        "contexts": [{"name": "raw", "context": {"cluster": "raw", "user": "raw"}}],
    }))
    return KubernetesClientApi.connect(ClientSettings(kubeconfig=str(kubeconfig), request_timeout_s=timeout_s))


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], RawServer]]:
    servers: list[RawServer] = []

    def start(behaviour: Behaviour) -> RawServer:
        servers.append(RawServer(behaviour))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


CALLS: dict[str, tuple[Callable[[KubeApi], Any], str]] = {
    "get pod": (lambda api: api.get_pod("ns", "p"), "get pod ns/p"),
    "patch pod": (lambda api: api.patch_pod_annotations("ns", "p", {"a": "1"}, resource_version="4"), "patch pod ns/p"),
    "bind pod": (lambda api: api.bind_pod("ns", "p", "uid-1", "n1"), "bind pod ns/p to n1"),
    "replace configmap": (lambda api: api.replace_configmap("ns", "cm", {"metadata": {"name": "cm"}, "data": {}}), "replace configmap ns/cm"),
    "replace lease": (lambda api: api.replace_lease("ns", "tessera-extender", LEASE), "replace lease ns/tessera-extender"),
}


@pytest.mark.parametrize("behaviour", [close_quietly, reset, never_answer, cut_short, not_json], ids=lambda b: b.__name__)
@pytest.mark.parametrize("call", list(CALLS))
def test_a_call_without_a_usable_answer_is_a_transport_error_sent_once(
    serve: Callable[[Behaviour], RawServer], tmp_path: Path, behaviour: Behaviour, call: str
) -> None:
    server = serve(behaviour)
    invoke, name = CALLS[call]
    with pytest.raises(TransportError) as info:
        invoke(connect(server.port, tmp_path))
    assert info.value.message.startswith(f"{name}: ") and may_have_applied(info.value)
    assert len(server.requests) == 1  # urllib3's default would have sent the PUTs and GETs again


def test_a_refused_connection_is_a_transport_error(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    with pytest.raises(TransportError) as info:
        connect(port, tmp_path).get_node("n1")
    assert info.value.message.startswith("get node n1: no answer from the API server") and "Connection refused" in info.value.message


def test_a_503_with_retry_after_reaches_the_caller_without_a_second_put(serve: Callable[[Behaviour], RawServer], tmp_path: Path) -> None:
    server = serve(busy_503)
    with pytest.raises(KubeApiError) as info:
        connect(server.port, tmp_path).replace_lease("ns", "tessera-extender", LEASE)
    assert (info.value.status, info.value.message) == (503, "busy") and len(server.requests) == 1


def test_a_watch_that_breaks_off_yields_what_came_then_raises_transport_error(serve: Callable[[Behaviour], RawServer], tmp_path: Path) -> None:
    server = serve(watch_then_break)
    stream = connect(server.port, tmp_path).watch_pods(resource_version="2", stop_after_s=5)
    assert next(stream).object["metadata"]["name"] == "p"
    with pytest.raises(TransportError) as info:
        next(stream)
    assert info.value.message.startswith("watch pods: the stream broke off")


def test_a_silent_watch_is_a_transport_error_after_its_timeout(serve: Callable[[Behaviour], RawServer], tmp_path: Path) -> None:
    server = serve(never_answer)
    with pytest.raises(TransportError) as info:
        list(connect(server.port, tmp_path, timeout_s=0.3).watch_nodes(resource_version="2", stop_after_s=1))
    assert info.value.message.startswith("watch nodes: no answer from the API server")
    assert b"timeoutSeconds=1" in server.requests[0]


def test_lease_writes_send_micro_times_exactly_as_given(serve: Callable[[Behaviour], RawServer], tmp_path: Path) -> None:
    server = serve(answer_lease)
    answered = connect(server.port, tmp_path).replace_lease("ns", "tessera-extender", LEASE)
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"PUT /apis/coordination.k8s.io/v1/namespaces/ns/leases/tessera-extender HTTP/1.1")
    assert json.loads(body) == LEASE == answered  # the model round trip would send "2026-11-28T10:00:00+00:00"


def answer_list(conn: socket.socket, body: bytes) -> None:
    reply = json.dumps({"kind": "ResourceSliceList", "items": [{"metadata": {"name": "s"}}], "metadata": {}}).encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(reply), reply))


@pytest.mark.parametrize(
    ("call", "request_line"),
    [
        (lambda api: api.get_resource_claim("ns", "c"), b"GET /apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c HTTP/1.1"),
        (lambda api: api.list_resource_slices(node_name="n1", driver="gpu.tessera.dev"), b"GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dn1%2Cspec.driver%3Dgpu.tessera.dev HTTP/1.1"),
        (lambda api: api.list_resource_slices(), b"GET /apis/resource.k8s.io/v1/resourceslices HTTP/1.1"),
        (lambda api: api.list_resource_claims(), b"GET /apis/resource.k8s.io/v1/resourceclaims HTTP/1.1"),
        (lambda api: api.create_resource_slice({"metadata": {"generateName": "n1-"}}), b"POST /apis/resource.k8s.io/v1/resourceslices HTTP/1.1"),
        (lambda api: api.replace_resource_slice("s", {"metadata": {"name": "s"}}), b"PUT /apis/resource.k8s.io/v1/resourceslices/s HTTP/1.1"),
        (lambda api: api.delete_resource_slice("s"), b"DELETE /apis/resource.k8s.io/v1/resourceslices/s HTTP/1.1"),
    ],
)
def test_resource_api_calls_go_to_resource_k8s_io_v1(serve: Callable[[Behaviour], RawServer], tmp_path: Path, call: Callable[[KubeApi], Any], request_line: bytes) -> None:
    server = serve(answer_list)
    answer = call(connect(server.port, tmp_path))
    assert server.requests[0].split(b"\r\n", 1)[0] == request_line
    if request_line.startswith(b"GET /apis/resource.k8s.io/v1/resourceslices"):
        assert answer == [{"metadata": {"name": "s"}}]


def _watch_of(kind: str) -> Behaviour:
    def behaviour(conn: socket.socket, _: bytes) -> None:
        events = b"".join(
            json.dumps({"type": t, "object": {"kind": kind, "metadata": {"name": "x", "resourceVersion": rv}}}).encode() + b"\n"
            for t, rv in (("ADDED", "4"), ("MODIFIED", "5"), ("DELETED", "6"))
        )
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(events), events))
        conn.close()

    return behaviour


@pytest.mark.parametrize(
    ("call", "kind", "request_line"),
    [
        (lambda api: api.watch_resource_slices(driver="gpu.tessera.dev", resource_version="3", stop_after_s=60), "ResourceSlice",
         b"GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dgpu.tessera.dev&watch=true&resourceVersion=3&timeoutSeconds=60 HTTP/1.1"),
        (lambda api: api.watch_resource_claims(stop_after_s=60), "ResourceClaim",
         b"GET /apis/resource.k8s.io/v1/resourceclaims?watch=true&timeoutSeconds=60 HTTP/1.1"),
    ],
)
def test_dra_watches_go_to_resource_k8s_io_v1_and_yield_each_event(
    serve: Callable[[Behaviour], RawServer], tmp_path: Path, call: Callable[[KubeApi], Any], kind: str, request_line: bytes
) -> None:
    server = serve(_watch_of(kind))
    events = list(call(connect(server.port, tmp_path)))
    assert server.requests[0].split(b"\r\n", 1)[0] == request_line
    assert [(e.type, e.object["metadata"]["resourceVersion"]) for e in events] == [("ADDED", "4"), ("MODIFIED", "5"), ("DELETED", "6")]


def test_a_dra_watch_answered_410_is_the_status_error(serve: Callable[[Behaviour], RawServer], tmp_path: Path) -> None:
    def gone(conn: socket.socket, _: bytes) -> None:
        status = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old resource version: 3 (9)", "reason": "Expired", "code": 410}).encode()
        conn.sendall(b"HTTP/1.1 410 Gone\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(status), status))

    server = serve(gone)
    with pytest.raises(KubeApiError) as info:
        list(connect(server.port, tmp_path).watch_resource_claims(resource_version="3", stop_after_s=60))
    assert (info.value.status, info.value.message) == (410, "too old resource version: 3 (9)")


@pytest.mark.parametrize(
    ("call", "request_line"),
    [
        (lambda api: api.list_resource_slices_and_version(driver="gpu.tessera.dev"), b"GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dgpu.tessera.dev HTTP/1.1"),
        (lambda api: api.list_resource_claims_and_version(), b"GET /apis/resource.k8s.io/v1/resourceclaims HTTP/1.1"),
    ],
)
def test_dra_lists_give_the_lists_resource_version(serve: Callable[[Behaviour], RawServer], tmp_path: Path, call: Callable[[KubeApi], Any], request_line: bytes) -> None:
    def listed(conn: socket.socket, _: bytes) -> None:
        reply = json.dumps({"kind": "List", "items": [{"metadata": {"name": "s"}}], "metadata": {"resourceVersion": "42"}}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(reply), reply))

    server = serve(listed)
    assert call(connect(server.port, tmp_path)) == ([{"metadata": {"name": "s"}}], "42")
    assert server.requests[0].split(b"\r\n", 1)[0] == request_line
