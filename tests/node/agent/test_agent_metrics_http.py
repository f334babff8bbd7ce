"""The node agent's /metrics endpoint against hostile and bursty clients over real HTTP: other
paths 404, other methods 405, garbage 4xx (all in the JSON error shape), Prometheus' formats and
gzip as prometheus_client serves them, 64 scrapers at once all answered, and slow or idle clients
above the connection cap never keeping a scrape out."""
from __future__ import annotations

import gzip
import http.client
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_world import World
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tessera.httpd.prometheus import METRICS_LIMITS
from tessera_node.agent.metrics import serve_metrics

sys.path.insert(0, str(Path(__file__).parents[2] / "tessera" / "httpd"))
from raw_http import Hostile, burst, closed_by_peer, exchange, request_line  # noqa: E402


@pytest.fixture
def port(tmp_path: Path) -> Iterator[int]:
    world = World(tmp_path)
    world.tick()
    server, _thread, bound = serve_metrics(world.agent.view.get, "127.0.0.1", 0)
    yield bound
    server.stop(drain_s=1.0)


def _get(port: int, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _families(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/", 404, None),
        ("GET", "/metricsx", 404, None),
        ("GET", "/favicon.ico", 404, None),
        ("POST", "/metrics", 405, "GET, HEAD"),
        ("DELETE", "/metrics", 405, "GET, HEAD"),
    ],
)
def test_other_paths_and_methods_get_json_errors(port: int, method: str, path: str, status: int, allow: str | None) -> None:
    got, headers, body = _get(port, method, path)
    assert (got, headers.get("allow")) == (status, allow)
    assert headers["content-type"] == "application/json" and set(json.loads(body)) == {"error", "path"}
    assert _get(port, "GET", "/metrics")[0] == 200


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"\x00\x01garbage\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 150 + b"\r\n", 431),
        (request_line("GET", "/metrics", b"x" * 100_000), 413),
        (b"GET /metrics HTTP/3.0\r\n\r\n", 400),
    ],
)
def test_garbage_gets_a_json_4xx_and_scrapes_go_on(port: int, raw: bytes, status: int) -> None:
    replies = exchange(port, raw)
    assert [r.status for r in replies] == [status]
    assert set(replies[0].json()) == {"error", "path"}
    assert _get(port, "GET", "/metrics")[0] == 200


def test_formats_and_compression_are_negotiated_like_prometheus_client(port: int) -> None:
    status, headers, body = _get(port, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "tessera_gpu_healthy" in _families(body.decode())
    status, headers, body = _get(port, "GET", "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"})
    assert headers["content-type"].startswith("application/openmetrics-text") and headers["content-encoding"] == "gzip"
    assert gzip.decompress(body).decode().rstrip().endswith("# EOF")
    status, headers, body = _get(port, "HEAD", "/metrics")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0


@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "new-connection-per-request"])
def test_64_scrapers_at_once_are_all_answered(port: int, keep_alive: bool) -> None:
    def scrape(conn: http.client.HTTPConnection, client: int, i: int) -> int:
        conn.request("GET", "/metrics", headers={} if keep_alive else {"Connection": "close"})
        response = conn.getresponse()
        assert "tessera_agent_ticks" in _families(response.read().decode())
        return response.status

    result = burst(lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=60), scrape, clients=64, requests_per_client=3, keep_alive=keep_alive)
    assert result.errors == [] and result.statuses == [200] * (64 * 3)


@pytest.mark.parametrize("kind", [Hostile.SILENT, Hostile.HEAD, Hostile.BODY], ids=lambda k: k.value)
def test_slow_clients_above_the_cap_never_keep_a_scrape_out(port: int, kind: Hostile) -> None:
    hostile = [kind.open(port, path="/metrics") for _ in range(METRICS_LIMITS.max_connections + 16)]
    try:
        status, _headers, body = _get(port, "GET", "/metrics")
        assert status == 200 and "tessera_agent_ticks" in _families(body.decode())
        assert closed_by_peer(hostile[0])  # the oldest made room
    finally:
        for sock in hostile:
            sock.close()


_HEADER_VALUES = st.one_of(
    st.sampled_from(["", "*/*", "gzip", "application/openmetrics-text; version=1.0.0", "text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "identity;q=0"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=40),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    method=st.sampled_from(["GET", "HEAD", "POST", "OPTIONS"]),
    path=st.sampled_from(["/metrics", "/metrics?x=1", "/metrics/", "//metrics", "/"]),
    accept=_HEADER_VALUES,
    encoding=_HEADER_VALUES,
)
def test_any_scrape_request_gets_200_or_a_4xx(port: int, method: str, path: str, accept: str, encoding: str) -> None:
    headers = {"Accept": accept, "Accept-Encoding": encoding}
    raw = request_line(method, path, headers=headers)
    replies = exchange(port, raw, head=method == "HEAD")
    assert len(replies) == 1 and (replies[0].status == 200 or 400 <= replies[0].status < 500), (raw, replies)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.binary(max_size=300) | st.binary(max_size=100).map(lambda tail: b"GET /metrics HTTP/1.1\r\n" + tail))
def test_any_bytes_as_a_request_never_get_a_5xx(port: int, raw: bytes) -> None:
    for reply in exchange(port, raw.replace(b"HEAD", b"HEAP")):  # a HEAD reply carries no body
        assert reply.status < 500, (raw, reply.status, reply.body)
    assert _get(port, "GET", "/metrics")[0] == 200
