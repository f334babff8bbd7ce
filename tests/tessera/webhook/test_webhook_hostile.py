"""Malformed, unexpected and concurrent AdmissionReview traffic over real HTTPS.

Every 200 is checked the way kube-apiserver checks it (`VerifyAdmissionResponse` in
`staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/request/admissionreview.go`, v1.30 and
master): response present, uid equal to the request's, apiVersion/kind admission.k8s.io/v1
AdmissionReview, patch and patchType together. A review that has a uid always gets such an
answer (allowed=false with a message when it is malformed); one without gets 400 with our JSON
error, and the API server applies the webhook's failurePolicy. So does a body that is not valid
JSON for Kubernetes at all, such as one holding a lone surrogate escape (kube-apiserver's Go
encoder never writes one). Slow and idle clients above the connection cap, half-finished TLS
handshakes included, never keep the API server's reviews out.
"""
from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_helpers import SETTINGS, WebhookClient, container, pod, review_body, start_webhook

from tessera.model import contract
from tessera.webhook.server import ServerSettings
from tessera.webhook.tls import CertBundle

sys.path.insert(0, str(Path(__file__).parents[1] / "httpd"))
from raw_http import Hostile, RawConnection, burst, closed_by_peer, exchange, request_line  # noqa: E402

UID = "0f3c1a52-8d7e-4b7a-9a51-2b2f0c6d9e11"
GPU_POD = pod(container("main", {contract.GPU_CORE: "30"}))


def verify_admission_response(uid: str, answer: Any) -> dict[str, Any]:
    """kube-apiserver's checks of a mutating webhook's reply; returns the response."""
    assert isinstance(answer, dict)
    assert (answer.get("apiVersion"), answer.get("kind")) == ("admission.k8s.io/v1", "AdmissionReview"), answer
    response = answer.get("response")
    assert isinstance(response, dict), "webhook response was absent"
    assert response.get("uid") == uid, f"expected response.uid={uid!r}, got {response.get('uid')!r}"
    assert isinstance(response.get("allowed"), bool)
    assert ("patch" in response) == ("patchType" in response), "patch and patchType go together"
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(response["patch"])), list)
    if not response["allowed"]:
        status = response["status"]
        assert status["code"] == 400 and status["message"].startswith("tessera: ")
    return response


def _post(webhook: WebhookClient, body: Any, path: str = "/mutate") -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, reply = webhook.request("POST", path, raw)
    return status, json.loads(reply)


def _with_request(**changes: Any) -> dict[str, Any]:
    body = review_body(GPU_POD, uid=UID)
    body["request"].update(changes)
    return body


@pytest.mark.parametrize(
    ("body", "path", "fragment"),
    [
        (b"{not json", None, "not valid JSON"),
        (b"\xff{}", None, "not UTF-8"),
        (b"[" * 3000 + b"]" * 3000, None, "nests deeper than 100 levels"),
        (b"", None, "body is empty"),
        ([], None, "must be a JSON object"),
        ({**review_body(GPU_POD), "apiVersion": "admission.k8s.io/v1beta1"}, "apiVersion", "admissionReviewVersions [v1]"),
        ({**review_body(GPU_POD), "kind": "Pod"}, "kind", "must be AdmissionReview"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request", "is required"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}, "request", "is required"),
        ({**review_body(GPU_POD), "request": {"object": GPU_POD}}, "request.uid", "is required"),
        (_with_request(uid=42), "request.uid", "non-empty string"),
        (_with_request(uid=""), "request.uid", "non-empty string"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_body_that_is_no_admission_review_gets_400_with_a_json_reason(
    webhook: WebhookClient, body: Any, path: str | None, fragment: str
) -> None:
    status, reply = _post(webhook, body)
    assert status == 400
    assert set(reply) == {"error", "path"} and reply["path"] == path and fragment in reply["error"]
    assert webhook.review(review_body(GPU_POD))["allowed"] is True  # still serving


LIMITS = 'request.object.spec.containers[0].resources.limits["tessera.dev/gpu-core"]'


@pytest.mark.parametrize(
    ("request_changes", "fragment"),
    [
        ({"object": None}, "request.object: is required"),
        ({"object": []}, "request.object: must be an object, got array"),
        ({"object": {**GPU_POD, "spec": "x"}}, "request.object.spec: must be an object"),
        ({"object": {**GPU_POD, "metadata": 1}}, "request.object.metadata: must be an object"),
        ({"object": pod("main")}, "request.object.spec.containers[0]: must be an object"),
        ({"object": pod(container("main", {contract.GPU_CORE: "abc"}))}, f"{LIMITS}: 'abc' is not a Kubernetes quantity"),
        ({"object": pod(container("main", {contract.GPU_CORE: ["30"]}))}, f"{LIMITS}: must be a quantity"),
        ({"object": pod(container("main", {contract.GPU_CORE: "30"}, env="A=1"))}, "request.object.spec.containers[0].env: must be an array"),
        ({"object": pod(container("main", {contract.GPU_CORE: "30"}), tolerations=["x"])}, "request.object.spec.tolerations[0]: must be an object"),
        ({"object": pod(container("main", {contract.GPU_CORE: "30"}), nodeSelector={"a": 1})}, "request.object.spec.nodeSelector.a: must be a string"),
        ({"kind": "Pod"}, "request.kind: must be an object, got string"),
        ({"operation": 1}, "request.operation: must be a string"),
    ],
)
def test_a_malformed_review_with_a_uid_is_denied_in_a_valid_admission_review(
    webhook: WebhookClient, request_changes: dict[str, Any], fragment: str
) -> None:
    status, answer = _post(webhook, _with_request(**request_changes))
    assert status == 200
    response = verify_admission_response(UID, answer)
    assert response["allowed"] is False and fragment in response["status"]["message"]
    assert "patch" not in response


def test_every_answer_passes_the_api_servers_checks(webhook: WebhookClient) -> None:
    for body in (review_body(GPU_POD, uid=UID), review_body(pod(container("c")), uid=UID), review_body(GPU_POD, uid=UID, operation="UPDATE")):
        status, answer = _post(webhook, body)
        assert status == 200
        verify_admission_response(UID, answer)


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/mutate", 405, "POST"),
        ("PUT", "/mutate/qgpu", 405, "POST"),
        ("POST", "/healthz", 405, "GET, HEAD"),
        ("POST", "/mutate/other", 404, None),
        ("POST", "/metrics", 405, "GET, HEAD"),
        ("GET", "/metric", 404, None),
    ],
)
def test_unknown_paths_get_404_and_wrong_methods_405_with_allow(
    webhook: WebhookClient, method: str, path: str, status: int, allow: str | None
) -> None:
    conn = http.client.HTTPSConnection("localhost", webhook.port, context=webhook.context, timeout=10)
    conn.request(method, path, body=b"{}" if method in ("POST", "PUT") else None)
    response = conn.getresponse()
    reply = json.loads(response.read())
    conn.close()
    assert (response.status, response.getheader("Allow")) == (status, allow)
    assert set(reply) == {"error", "path"}


def test_a_body_over_the_limit_gets_413(webhook: WebhookClient) -> None:
    conn = RawConnection.open(webhook.port, tls=webhook.context)
    conn.send(request_line("POST", "/mutate", b"", {"Content-Length": str(5 * 1024 * 1024)}))
    reply = conn.read_response()
    conn.close()
    assert reply is not None and reply.status == 413 and "exceeds the limit of 4194304 bytes" in reply.json()["error"]


_ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=20)  # lone surrogates included
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=20) | _ANY_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10) | _ANY_TEXT, children, max_size=4),
    max_leaves=12,
)


@st.composite
def _mutated_review(draw: st.DrawFn) -> Any:
    body: Any = json.loads(json.dumps(review_body(pod(container("main", {contract.QGPU_CORE: "40"}), node_selector={contract.LABEL_POOL: "shared-a"}), uid=UID)))
    parent: Any = None
    key: Any = None
    node = body
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 4)) > 0:
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        parent, node = node, node[key]
    replacement = draw(_JSON)
    if parent is None:
        return replacement
    parent[key] = replacement
    return body


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=_mutated_review())
def test_fuzzed_reviews_get_a_valid_answer_or_a_400(webhook: WebhookClient, body: Any) -> None:
    status, reply = _post(webhook, body)
    if status == 200:
        verify_admission_response(body["request"]["uid"], reply)
    else:
        assert status == 400 and set(reply) == {"error", "path"}


@pytest.fixture
def tight(localhost_bundle: CertBundle) -> Iterator[WebhookClient]:
    """A webhook with two connection slots and a 0.5 s request timeout."""
    server, thread = start_webhook(SETTINGS, localhost_bundle, ServerSettings(host="127.0.0.1", port=0, max_connections=2, request_timeout_s=0.5))
    yield WebhookClient(server.port, ssl.create_default_context(cadata=localhost_bundle.ca_pem))
    server.shutdown()
    thread.join(10)


def test_clients_that_never_finish_the_tls_handshake_do_not_block_others(tight: WebhookClient) -> None:
    silent = [socket.create_connection(("127.0.0.1", tight.port)) for _ in range(3)]  # TCP only, no ClientHello
    plain = RawConnection.open(tight.port)
    plain.send(request_line("GET", "/healthz"))  # plain HTTP on the TLS port
    assert tight.request("GET", "/healthz") == (200, b"ok\n")
    assert plain.is_closed_by_peer()
    for sock in silent:
        sock.settimeout(5)
        assert sock.recv(1) == b""  # cut: after the timeout, or to make room
        sock.close()
    plain.close()
    assert tight.review(review_body(GPU_POD))["allowed"] is True


@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "new-connection-per-request"])
def test_a_burst_of_64_api_server_connections_is_answered_in_full(webhook: WebhookClient, keep_alive: bool) -> None:
    lock = threading.Lock()
    bad: list[str] = []

    def review(conn: http.client.HTTPConnection, client: int, i: int) -> int:
        uid = f"00000000-0000-0000-0000-{client:06d}{i:06d}"
        headers = {"Content-Type": "application/json"} if keep_alive else {"Content-Type": "application/json", "Connection": "close"}
        conn.request("POST", "/mutate", body=json.dumps(review_body(GPU_POD, uid=uid)).encode(), headers=headers)
        response = conn.getresponse()
        answer = json.loads(response.read())
        try:
            assert verify_admission_response(uid, answer)["allowed"] is True
        except AssertionError as exc:
            with lock:
                bad.append(str(exc))
        return response.status

    result = burst(
        lambda: http.client.HTTPSConnection("localhost", webhook.port, context=webhook.context, timeout=60),
        review,
        clients=64,
        requests_per_client=3,
        keep_alive=keep_alive,
    )
    assert result.errors == [] and bad == []
    assert result.statuses == [200] * (64 * 3)


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"uid": "\ud800"}, "request.uid"),
        ({"namespace": "team-\udc00"}, "request.namespace"),
        ({"object": pod(container("ma\udbffin", {contract.GPU_CORE: "30"}))}, "request.object.spec.containers[0].name"),
        ({"object": pod(container("main", {contract.GPU_CORE: "30\ud800"}))}, 'request.object.spec.containers[0].resources.limits["tessera.dev/gpu-core"]'),
    ],
)
def test_a_lone_surrogate_gets_400_naming_the_field(webhook: WebhookClient, change: dict[str, Any], path: str) -> None:
    status, reply = _post(webhook, _with_request(**change))
    assert status == 400 and reply["path"] == path and "lone surrogate" in reply["error"]
    assert webhook.review(review_body(GPU_POD))["allowed"] is True


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=st.binary(max_size=400))
def test_any_bytes_as_a_review_body_get_200_or_400(webhook: WebhookClient, body: bytes) -> None:
    status, reply = webhook.request("POST", "/mutate", body)
    assert status in (200, 400), (status, reply)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.binary(max_size=300) | st.binary(max_size=200).map(lambda tail: b"POST /mutate HTTP/1.1\r\nContent-Length: 40\r\n\r\n" + tail))
def test_any_bytes_as_a_whole_request_over_tls_never_get_a_5xx(tight: WebhookClient, raw: bytes) -> None:
    """Against the 0.5 s request timeout: a TLS client cannot half-close, so an incomplete
    request ends with the timeout (a 408, or a close)."""
    for reply in exchange(tight.port, raw.replace(b"HEAD", b"HEAP"), tls=tight.context):  # a HEAD reply carries no body
        assert reply.status < 500, (raw, reply.status, reply.body)
    assert tight.request("GET", "/healthz") == (200, b"ok\n")


CAP = 3


@pytest.fixture
def capped(localhost_bundle: CertBundle) -> Iterator[WebhookClient]:
    """A webhook holding at most CAP connections, with a 30 s request timeout: only making room
    (never a deadline) lets the API server in while slow clients hold them."""
    settings = ServerSettings(host="127.0.0.1", port=0, max_connections=CAP, request_timeout_s=30.0)
    server, thread = start_webhook(SETTINGS, localhost_bundle, settings)
    yield WebhookClient(server.port, ssl.create_default_context(cadata=localhost_bundle.ca_pem))
    server.shutdown()
    thread.join(10)


@pytest.mark.parametrize("kind", [Hostile.SILENT, Hostile.TLS_HELLO, Hostile.HEAD, Hostile.BODY], ids=lambda k: k.value)
def test_slow_clients_and_half_finished_handshakes_above_the_cap_never_keep_reviews_out(capped: WebhookClient, kind: Hostile) -> None:
    hostile = [kind.open(capped.port, path="/mutate", tls=capped.context) for _ in range(3 * CAP)]
    try:
        assert capped.review(review_body(GPU_POD))["allowed"] is True
        assert closed_by_peer(hostile[0])  # the oldest made room
    finally:
        for sock in hostile:
            sock.close()
