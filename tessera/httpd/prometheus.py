"""/metrics in Prometheus' formats, as prometheus_client's own handler answers it: the format the
scraper's `Accept` asks for (text 0.0.4 or OpenMetrics) and gzip when it accepts gzip (Prometheus
always does)."""
from __future__ import annotations

import gzip
import threading
from collections.abc import Mapping
from typing import Final

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from tessera.httpd.framing import HttpLimits, Request, Response
from tessera.httpd.server import Endpoint, HardenedHTTPServer, Routes

# Scrapes carry no body; 64 connections at once cover several Prometheus replicas, kubelet's probe
# and a burst of curl with room to spare. The backlog is the other servers': it is also how many
# new connections the server takes in beyond the cap while slow ones make room (HttpLimits). A
# smaller one fills under a flood of reconnecting slow clients, and a new scrape then waits for
# TCP's 1 s retransmission (docs/benchmarks.md, "Slow and idle clients").
METRICS_LIMITS: Final = HttpLimits(max_body_bytes=64 * 1024, max_connections=64, backlog=1024)


def metrics_response(registry: Collector, request: Request) -> Response:
    encoder, content_type = choose_encoder(request.headers.get("Accept") or "")
    output = encoder(registry)
    if gzip_accepted(request.headers.get("Accept-Encoding") or ""):
        return Response(200, gzip.compress(output), content_type, (("Content-Encoding", "gzip"),))
    return Response(200, output, content_type)


def serve_metrics(registry: Collector, host: str, port: int, name: str) -> tuple[HardenedHTTPServer, threading.Thread, int]:
    """Serve GET /metrics of `registry` on host:port (port 0 picks a free one); returns (server,
    thread, port). Other paths get 404 and other methods 405, in the JSON shape of `tessera.httpd`;
    stop with `server.stop()`. Every node-side /metrics endpoint runs on this."""
    endpoints: dict[str, Mapping[str, Endpoint]] = {"/metrics": {"GET": lambda request: metrics_response(registry, request)}}
    server = HardenedHTTPServer((host, port), Routes(endpoints.get), METRICS_LIMITS, name=name)
    thread = server.start()
    return server, thread, server.port
