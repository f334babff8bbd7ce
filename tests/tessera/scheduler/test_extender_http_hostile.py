"""Malformed and unexpected requests to the extender over real HTTP: each gets a 4xx with the JSON
error shape and the path of the field at fault, never a 5xx or a dropped connection, and the
extender keeps scheduling afterwards; slow and idle clients above the connection cap never keep
kube-scheduler's /filter out. (Framing and limits in depth: tests/tessera/httpd.)"""
from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extender_harness import Harness, node_manifest, pod_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kube_scheduler_emulator import ExtenderClient

from tessera.kube.fake import FakeKubeApi
from tessera.model.contract import GPU_CORE
from tessera.scheduler.http_server import ServerSettings
from tessera.scheduler.service import ExtenderConfig, ExtenderService
from tessera.scheduler.sync import SyncSettings

sys.path.insert(0, str(Path(__file__).parents[1] / "httpd"))
from raw_http import Hostile, closed_by_peer, exchange  # noqa: E402

POD = pod_manifest("p", ("main", 30, 2048))
POD["metadata"]["uid"] = "uid-p"


def _with(path: str | tuple[str, ...], value: Any) -> dict[str, Any]:
    """A valid filter body with the value at `path` (dotted, or a tuple of keys) replaced."""
    body = json.loads(json.dumps({"Pod": POD, "NodeNames": ["n1"]}))
    *parents, last = path.split(".") if isinstance(path, str) else path
    target = body
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return body


@pytest.fixture(scope="module")
def extender() -> Iterator[tuple[Harness, ExtenderService]]:
    harness = Harness(FakeKubeApi())
    harness.api.create_node(node_manifest("n1", gpus=2))
    service = harness.start()
    yield harness, service
    harness.close()


def _post(service: ExtenderService, path: str, payload: Any) -> tuple[int, Any]:
    client = ExtenderClient("127.0.0.1", service.port)
    try:
        status, raw = client.post_raw(path, payload if isinstance(payload, bytes) else json.dumps(payload).encode())
    finally:
        client.close()
    return status, json.loads(raw)


def _schedules(harness: Harness, service: ExtenderService) -> None:
    """The extender still answers a well-formed filter for a fresh pod."""
    status, reply = _post(service, "/filter", {"Pod": POD, "NodeNames": ["n1"]})
    assert status == 200 and reply["NodeNames"] == ["n1"], reply


CORE = ("Pod", "spec", "containers", "0", "resources", "limits", GPU_CORE)
LIMITS = f'Pod.spec.containers[0].resources.limits["{GPU_CORE}"]'


@pytest.mark.parametrize(
    ("verb", "body", "path", "fragment"),
    [
        ("filter", _with("Pod", "pod"), "Pod", "must be an object, got string"),
        ("filter", _with("Pod.metadata", None), "Pod.metadata", "is required"),
        ("filter", _with("Pod.spec", []), "Pod.spec", "must be an object, got array"),
        ("filter", _with("Pod.spec.containers", {"main": {}}), "Pod.spec.containers", "must be an array"),
        ("filter", _with("Pod.spec.containers.0", "main"), "Pod.spec.containers[0]", "must be an object"),
        ("filter", _with("Pod.spec.containers.0", None), "Pod.spec.containers[0]", "must be an object, got null"),
        ("filter", _with("Pod.spec.containers.0.name", 7), "Pod.spec.containers[0].name", "must be a string, got integer"),
        ("filter", _with("Pod.spec.containers.0.resources.limits", ["30"]), "Pod.spec.containers[0].resources.limits", "must be an object"),
        ("filter", _with(CORE, "thirty"), LIMITS, "not a Kubernetes quantity"),
        ("filter", _with(CORE, "1e99999"), LIMITS, "not a Kubernetes quantity"),
        ("filter", _with(CORE, True), LIMITS, "must be a quantity"),
        ("filter", _with(CORE, 2**70), LIMITS, "must be a quantity"),
        ("filter", _with("Pod.metadata.annotations", {"a": 1}), "Pod.metadata.annotations.a", "must be a string"),
        ("filter", _with("Pod.metadata.uid", ["u"]), "Pod.metadata.uid", "must be a string, got array"),
        ("filter", _with("Pod.spec.tolerations", [1]), "Pod.spec.tolerations[0]", "must be an object"),
        ("filter", _with("NodeNames", "n1"), "NodeNames", "must be an array"),
        ("filter", _with("NodeNames", ["n1", 2]), "NodeNames[1]", "must be a string"),
        ("filter", {"Pod": POD, "Nodes": []}, "Nodes", "must be a JSON object"),
        ("filter", {"Pod": POD, "Nodes": {"items": {}}}, "Nodes.items", "must be an array"),
        ("filter", {"Pod": POD, "Nodes": {"items": [{"metadata": {"name": ""}}]}}, "Nodes.items[0].metadata.name", "is required"),
        ("prioritize", {"NodeNames": ["n1"]}, "Pod", "is required"),
        ("prioritize", [POD], None, "the request body must be a JSON object, got array"),
        ("bind", {"PodNamespace": "default", "PodUID": "u", "Node": "n1"}, "PodName", "is required"),
        ("bind", {"PodName": "p", "PodNamespace": "default", "PodUID": 5, "Node": "n1"}, "PodUID", "must be a string, got integer"),
        ("bind", {"PodName": "p", "PodNamespace": "default", "Node": None}, "Node", "is required"),
        ("preempt", {"Pod": POD, "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims", "must be a JSON object"),
        ("preempt", {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": {}}}}, 'NodeNameToMetaVictims["n1"].Pods', "must be an array"),
        ("preempt", {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": 1}]}}}, 'NodeNameToMetaVictims["n1"].Pods[0].UID', "is required"),
        (
            "preempt",
            {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": "1"}}},
            'NodeNameToMetaVictims["n1"].NumPDBViolations',
            "must be a non-negative integer",
        ),
        (
            "preempt",
            {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": 2**64}}},
            'NodeNameToMetaVictims["n1"].NumPDBViolations',
            "int64",
        ),
        ("preempt", {"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {}}]}}}, 'NodeNameToVictims["n1"].Pods[0].metadata.uid', "is required"),
        ("preempt", {"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [{"spec": 1}]}}}, 'NodeNameToVictims["n1"].Pods[0].spec', "must be an object"),
    ],
)
def test_wrong_types_and_missing_fields_get_400_naming_the_field(
    extender: tuple[Harness, ExtenderService], verb: str, body: Any, path: str | None, fragment: str
) -> None:
    harness, service = extender
    status, reply = _post(service, f"/{verb}", body)
    assert status == 400, reply
    assert set(reply) == {"error", "path"} and reply["path"] == path
    assert reply["error"].startswith(f"{verb}: ") and fragment in reply["error"]
    _schedules(harness, service)


def test_unknown_fields_are_ignored_as_go_ignores_them_and_logged_once(
    extender: tuple[Harness, ExtenderService], caplog: pytest.LogCaptureFixture
) -> None:
    harness, service = extender
    body = {"pod": POD, "nodenames": ["n1"], "FutureField": {"from": "kube-scheduler 1.99"}}  # Go matches keys case-insensitively
    with caplog.at_level(logging.INFO, logger="tessera.scheduler.http_server"):
        for _ in range(3):
            status, reply = _post(service, "/filter", body)
            assert status == 200 and reply["NodeNames"] == ["n1"]
    notes = [r.getMessage() for r in caplog.records if "FutureField" in r.getMessage()]
    assert len(notes) == 1 and "does not know" in notes[0]


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/filter", 405, "POST"),
        ("PUT", "/bind", 405, "POST"),
        ("POST", "/healthz", 405, "GET, HEAD"),
        ("DELETE", "/metrics", 405, "GET, HEAD"),
        ("POST", "/tessera/v1/unschedule", 404, None),
        ("GET", "/", 404, None),
    ],
)
def test_unknown_verbs_get_404_and_wrong_methods_405_with_allow(
    extender: tuple[Harness, ExtenderService], method: str, path: str, status: int, allow: str | None
) -> None:
    harness, service = extender
    conn = ExtenderClient("127.0.0.1", service.port)._conn
    conn.request(method, path, body=b"{}" if method in ("POST", "PUT") else None)
    response = conn.getresponse()
    reply = json.loads(response.read())
    conn.close()
    assert response.status == status and set(reply) == {"error", "path"}
    assert response.getheader("Allow") == allow
    _schedules(harness, service)


def test_unknown_paths_are_counted_under_one_label(extender: tuple[Harness, ExtenderService]) -> None:
    harness, service = extender
    for i in range(5):
        _post(service, f"/random-{i}", {})
    client = ExtenderClient("127.0.0.1", service.port)
    status, text = client.get("/metrics")
    client.close()
    assert 'tessera_extender_requests_total{code="404",verb="unknown"}' in text
    assert "random-" not in text  # a client cannot grow the label set


_ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=20)  # lone surrogates included
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False) | st.text(max_size=20) | _ANY_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10) | _ANY_TEXT, children, max_size=4),
    max_leaves=12,
)
_VALID_BODIES = {
    "filter": {"Pod": POD, "NodeNames": ["n1"]},
    "prioritize": {"Pod": POD, "Nodes": {"items": [node_manifest("n1")]}},
    "bind": {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "n1"},
    "preempt": {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-x"}], "NumPDBViolations": 0}}},
}


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[str, Any]:
    """A valid request body with one subtree replaced by arbitrary JSON."""
    verb = draw(st.sampled_from(sorted(_VALID_BODIES)))
    body: Any = json.loads(json.dumps(_VALID_BODIES[verb]))
    parent: Any = None
    key: Any = None
    node = body
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)) > 0:
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        parent, node = node, node[key]
    replacement = draw(_JSON)
    if parent is None:
        return verb, replacement
    parent[key] = replacement
    return verb, body


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=_mutated())
def test_fuzzed_bodies_never_get_a_5xx(extender: tuple[Harness, ExtenderService], case: tuple[str, Any]) -> None:
    harness, service = extender
    verb, body = case
    if verb == "bind":  # a bind may succeed and hold the GPU; keep the node free for the next case
        body = body if not isinstance(body, dict) else {**body, "Node": "nowhere"} if body.get("Node") == "n1" else body
    status, reply = _post(service, f"/{verb}", body)
    assert status in (200, 400), (status, reply)
    if status == 400:
        assert set(reply) == {"error", "path"}
    _schedules(harness, service)


_BIND_FIELDS = ("PodName", "PodNamespace", "PodUID", "Node")
_PLAIN_TEXT = st.text(st.characters(codec="utf-8"), max_size=8)  # never a surrogate


@pytest.mark.parametrize("field", _BIND_FIELDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(before=_PLAIN_TEXT, lone=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), after=_PLAIN_TEXT)
def test_a_lone_surrogate_in_any_bind_field_gets_400_naming_it(
    extender: tuple[Harness, ExtenderService], field: str, before: str, lone: str, after: str
) -> None:
    harness, service = extender
    body = {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "nowhere", field: before + lone + after}
    status, reply = _post(service, "/bind", body)
    assert status == 400, reply
    assert reply["path"] == field and reply["error"].startswith(f"{field}: string holds a lone surrogate")
    _schedules(harness, service)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(verb=st.sampled_from(sorted(_VALID_BODIES)), body=st.binary(max_size=400))
def test_any_bytes_as_a_body_get_200_or_400(extender: tuple[Harness, ExtenderService], verb: str, body: bytes) -> None:
    harness, service = extender
    status, reply = _post(service, f"/{verb}", body)
    assert status in (200, 400), (status, reply)
    _schedules(harness, service)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.binary(max_size=300) | st.sampled_from([b"POST /filter HTTP/1.1\r\n", b"POST /bind HTTP/1.1\r\nContent-Length: 3\r\n\r\n"]).flatmap(
    lambda head: st.binary(max_size=200).map(lambda tail: head + tail)
))
def test_any_bytes_as_a_whole_request_never_get_a_5xx(extender: tuple[Harness, ExtenderService], raw: bytes) -> None:
    harness, service = extender
    for reply in exchange(service.port, raw.replace(b"HEAD", b"HEAP")):  # a HEAD reply's length describes no body
        assert reply.status < 500, (raw, reply.status, reply.body)
    _schedules(harness, service)


CAP = 4


@pytest.fixture
def capped() -> Iterator[tuple[Harness, ExtenderService]]:
    """An extender holding at most CAP connections, with a 30 s request timeout: only making room
    (never a deadline) lets a newcomer in while slow clients hold them."""
    harness = Harness(FakeKubeApi())
    harness.api.create_node(node_manifest("n1", gpus=2))
    config = ExtenderConfig(
        server=ServerSettings(host="127.0.0.1", port=0, max_connections=CAP, request_timeout_s=30.0),
        sync=SyncSettings(watch_timeout_s=0.5, retry_backoff_s=0.1, janitor_interval_s=3600),
    )
    service = ExtenderService(harness.api, config)
    assert service.start(wait_ready_s=10), "extender cache did not sync"
    harness.services.append(service)
    yield harness, service
    harness.close()


@pytest.mark.parametrize("kind", [Hostile.SILENT, Hostile.HEAD, Hostile.BODY], ids=lambda k: k.value)
def test_slow_clients_above_the_cap_never_keep_filter_out(capped: tuple[Harness, ExtenderService], kind: Hostile) -> None:
    harness, service = capped
    hostile = [kind.open(service.port, path="/filter") for _ in range(3 * CAP)]
    try:
        _schedules(harness, service)  # kube-scheduler's /filter, on a new connection, answered
        assert closed_by_peer(hostile[0])  # the oldest slow client made room
    finally:
        for sock in hostile:
            sock.close()
