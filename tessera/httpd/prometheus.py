"""/metrics in Prometheus' formats, as prometheus_client's own handler answers it: the format the
scraper's `Accept` asks for (text 0.0.4 or OpenMetrics) and gzip when it accepts gzip (Prometheus
always does)."""
from __future__ import annotations

import gzip

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from tessera.httpd.framing import Request, Response


def metrics_response(registry: Collector, request: Request) -> Response:
    encoder, content_type = choose_encoder(request.headers.get("Accept") or "")
    output = encoder(registry)
    if gzip_accepted(request.headers.get("Accept-Encoding") or ""):
        return Response(200, gzip.compress(output), content_type, (("Content-Encoding", "gzip"),))
    return Response(200, output, content_type)
