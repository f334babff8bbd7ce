"""The node agent's /metrics endpoint against hostile and bursty clients over real HTTP: other
paths 404, other methods 405, garbage 4xx (all in the JSON error shape), Prometheus' formats and
gzip as prometheus_client serves them, and 64 scrapers at once all answered."""
from __future__ import annotations

import gzip
import http.client
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_world import World
from prometheus_client.parser import text_string_to_metric_families

from tessera_node.agent.metrics import serve_metrics

sys.path.insert(0, str(Path(__file__).parents[2] / "tessera" / "httpd"))
from raw_http import burst, exchange, request_line  # noqa: E402


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
