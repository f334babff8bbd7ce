"""The extender's HTTP adapter: decode kube-scheduler's JSON, call the core, encode the reply.

kube-scheduler POSTs to `<urlPrefix>/<verb>`; we route on the last path segment so any
`urlPrefix` works. Replies always carry Content-Length and the server speaks HTTP/1.1 keep-alive,
because kube-scheduler reuses connections. A body that is too large gets 413, one that is not
JSON or not the expected shape gets 400 with a message; neither affects other requests.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from tessera.scheduler.extender_types import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    WireError,
)
from tessera.scheduler.metrics import CONTENT_TYPE, ExtenderMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerSettings:
    """How the extender listens.

    host: default 127.0.0.1 so nothing is exposed by accident; in-cluster it is set to 0.0.0.0.
    port: default 8888, the port the KubeSchedulerConfiguration snippet points at.
    max_body_bytes: default 8 MiB. A full-Nodes request for ~1000 nodes is 2-5 MiB; anything
        larger is refused with 413 before it is read, so one client cannot exhaust memory.
    """

    host: str = "127.0.0.1"
    port: int = 8888
    max_body_bytes: int = 8 * 1024 * 1024


class ExtenderCore(Protocol):
    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult: ...
    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]: ...
    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult: ...
    def preempt(self, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult: ...
    def health(self) -> tuple[bool, str]: ...
    def refresh_metrics(self, metrics: ExtenderMetrics) -> None: ...


class _HttpError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _post_routes(core: ExtenderCore) -> dict[str, Callable[[Any], Any]]:
    return {
        "filter": lambda body: core.filter(ExtenderArgs.from_json(body)).to_json(),
        "prioritize": lambda body: [h.to_json() for h in core.prioritize(ExtenderArgs.from_json(body))],
        "bind": lambda body: core.bind(ExtenderBindingArgs.from_json(body)).to_json(),
        "preempt": lambda body: core.preempt(ExtenderPreemptionArgs.from_json(body)).to_json(),
    }


def _make_handler(core: ExtenderCore, metrics: ExtenderMetrics, settings: ServerSettings) -> type[BaseHTTPRequestHandler]:
    routes = _post_routes(core)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "tessera-extender"
        # headers and body go out in two writes; with Nagle on, the body waits for the client's
        # delayed ACK (~40 ms per reply on Linux)
        disable_nagle_algorithm = True
        _headers_buffer: list[bytes]  # BaseHTTPRequestHandler's: send_response/send_header fill it

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            log.debug("%s " + format, self.address_string(), *args)

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            # Headers and body in one write (end_headers() would send the headers alone): one
            # syscall per reply, and one release of the GIL instead of two, each of which can
            # cost a wait of up to the switch interval behind the sync threads.
            if self.request_version != "HTTP/0.9":  # as end_headers(): 0.9 replies have no headers
                self._headers_buffer.append(b"\r\n")
                body = b"".join(self._headers_buffer) + body
                self._headers_buffer = []
            self.wfile.write(body)

        def _send_json(self, status: HTTPStatus, payload: Any) -> None:
            self._send(status, json.dumps(payload, separators=(",", ":")).encode(), "application/json")

        def _verb(self) -> str:
            return self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]

        def _read_body(self) -> bytes:
            length_header = self.headers.get("Content-Length")
            if length_header is None:
                # chunked bodies are not supported; kube-scheduler always sends a length
                self.close_connection = True
                raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required")
            try:
                length = int(length_header)
            except ValueError:
                length = -1
            if length < 0:
                self.close_connection = True
                raise _HttpError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {length_header!r}")
            if length > settings.max_body_bytes:
                # the body is not read, so the connection cannot be reused
                self.close_connection = True
                raise _HttpError(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"request body of {length} bytes exceeds the limit of {settings.max_body_bytes} bytes",
                )
            return bytes(self.rfile.read(length))

        @staticmethod
        def _parse(raw: bytes) -> Any:
            try:
                return json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise _HttpError(HTTPStatus.BAD_REQUEST, f"request body is not valid JSON: {exc}") from None

        def _observe(self, verb: str, status: HTTPStatus, started: float) -> None:
            metrics.requests.labels(verb, str(int(status))).inc()
            metrics.latency.labels(verb).observe(time.perf_counter() - started)

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            started = time.perf_counter()
            verb = self._verb()
            route = routes.get(verb)
            status = HTTPStatus.OK
            try:
                raw = self._read_body()  # read first: an unread body would poison the keep-alive stream
                if route is None:
                    raise _HttpError(HTTPStatus.NOT_FOUND, f"unknown verb {verb!r}; use filter, prioritize, bind or preempt")
                body = self._parse(raw)
                try:
                    payload = route(body)
                except WireError as exc:
                    raise _HttpError(HTTPStatus.BAD_REQUEST, f"{verb}: {exc}") from None
                self._send_json(status, payload)
            except _HttpError as exc:
                status = exc.status
                self._send_json(status, {"Error": exc.message})
            except Exception as exc:  # keep serving: one bad request must not take the extender down
                log.exception("%s failed", verb)
                status = HTTPStatus.INTERNAL_SERVER_ERROR
                self._send_json(status, {"Error": f"internal error: {exc}"})
            self._observe(verb if route is not None else "unknown", status, started)

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            verb = self._verb()
            if verb in ("healthz", "readyz", "livez"):
                ok, message = core.health()
                status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
                self._send(status, (message + "\n").encode(), "text/plain; charset=utf-8")
            elif verb == "metrics":
                core.refresh_metrics(metrics)
                self._send(HTTPStatus.OK, metrics.render(), CONTENT_TYPE)
            else:
                self._send_json(HTTPStatus.NOT_FOUND, {"Error": f"unknown path {self.path!r}; GET /healthz or /metrics"})

    return Handler


class ExtenderHttpServer:
    """A running extender endpoint; `port` is the bound port (useful with port 0 in tests)."""

    def __init__(self, core: ExtenderCore, settings: ServerSettings, metrics: ExtenderMetrics | None = None) -> None:
        self.metrics = metrics or ExtenderMetrics()
        handler = _make_handler(core, self.metrics, settings)
        self._server = ThreadingHTTPServer((settings.host, settings.port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{host}:{self.port}"

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.05)

    def start(self) -> None:
        """Serve on a background thread (tests, --simulate)."""
        self._thread = threading.Thread(target=self.serve_forever, name="extender-http", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
