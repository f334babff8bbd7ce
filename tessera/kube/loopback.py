"""A loopback Kubernetes API server: a `FakeKubeApi` served as the REST API on 127.0.0.1.

Tests and benchmarks drive real clients against it (`KubernetesClientApi`, in process or in a
`tessera scheduler serve --kubeconfig FILE` subprocess; `write_kubeconfig` writes FILE) and
program faults into it while they run (`faults`, see `tessera.kube.loopback_faults`): refuse,
commit then fail, drop the connection before or after applying, delay, end a watch cleanly or with
410, pause a request until released. Plain HTTP, no authentication, HTTP/1.1 keep-alive like the
API server; watches are chunked JSON lines `{"type", "object"}` (k8s.io/apiserver
pkg/endpoints/handlers/watch.go `HandleHTTP`, v0.30.0 and v0.34.0). What each path answers is in
`tessera.kube.loopback_routes`.

Refusals and failures after a commit answer upstream's bodies: 409 the Conflict a second copy of
a landed request reads (`loopback_routes.retry_conflict`), 429 the priority-and-fairness filter's
plain-text "Too many requests, please try again later." with `Retry-After: 1` (k8s.io/apiserver
pkg/server/filters/priority-and-fairness.go `tooManyRequests`), 500 `NewInternalError`, 503
`NewServiceUnavailable`, 504 the `Timeout` a handler past its deadline answers while its write
may still commit (pkg/endpoints/handlers/finisher/finisher.go). The 500 and 503 messages say that
the loopback server injected them.

The server survives its clients vanishing at any point: a write to a closed connection ends that
request quietly, a blocked or delayed request finishes (or is let go when the server closes), and
the next client is served as before. A request that fails inside the server answers 500 with a
`Status` and is kept in `internal_errors()`, so a test can assert there were none.
"""
from __future__ import annotations

import itertools
import json
import select
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from tessera.kube.api import KubeApiError, WatchEvent
from tessera.kube.fake import FakeKubeApi
from tessera.kube.fake_status import (
    HANDLER_TIMEOUT,
    REQUEST_BODY_LIMIT,
    bad_request,
    entity_too_large,
    internal_error,
    service_unavailable,
    status_of,
    timeout,
)
from tessera.kube.fake_watch import too_old
from tessera.kube.loopback_faults import (
    CommitThenFail,
    Delay,
    DropAfter,
    DropBefore,
    EndWatch,
    ExpireWatch,
    Fault,
    Faults,
    Pause,
    Refuse,
    RequestKey,
)
from tessera.kube.loopback_routes import Answer, WatchPlan, apply, parse, retry_conflict, typed

_WATCH_SLICE_S: Final = 0.5  # how often an idle watch looks whether its client is still there
# k8s.io/apiserver pkg/server/filters/priority-and-fairness.go `tooManyRequests`: plain text via http.Error
_TOO_MANY: Final = Answer(
    429,
    text="Too many requests, please try again later.\n",
    headers=(("Retry-After", "1"), ("X-Content-Type-Options", "nosniff")),
)


class _Gone(Exception):
    """The client closed the connection before its answer was written."""


class LoopbackApiServer:
    """Serve `fake` on 127.0.0.1 (port 0: a free one) until `close()`; a context manager."""

    def __init__(self, fake: FakeKubeApi, *, port: int = 0) -> None:
        self.fake = fake
        self.faults = Faults()
        self._lock = threading.Lock()
        self._serial = itertools.count(1)
        self._requests: list[RequestKey] = []
        self._internal_errors: list[str] = []
        self._connections: set[socket.socket] = set()
        self._closing = threading.Event()
        self._http = _HttpServer(self, port)
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,), name="loopback-api", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """A kubeconfig whose current context is this server (no credentials: it needs none)."""
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "loopback", "cluster": {"server": self.url}}],
            "users": [{"name": "loopback", "user": {}}],
            "contexts": [{"name": "loopback", "context": {"cluster": "loopback", "user": "loopback", "namespace": namespace}}],
            "current-context": "loopback",
        }
        path.write_text(json.dumps(document, indent=2))
        return path

    def requests(self) -> list[RequestKey]:
        """Every request served so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def internal_errors(self) -> list[str]:
        """Tracebacks of requests that failed inside the server (answered 500)."""
        with self._lock:
            return list(self._internal_errors)

    def close(self) -> None:
        """Stop serving: let blocked requests go, end watches, close every connection."""
        self._closing.set()
        self.faults.close()
        self._http.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._http.server_close()
        self._thread.join(10)

    def __enter__(self) -> LoopbackApiServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- used by the request handler ---------------------------------------------------------------
    def opened(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)

    def serve(self, exchange: _Exchange) -> None:
        try:
            self._receive(exchange)
        except _Gone:
            pass
        except Exception:  # the server must outlive any one request; the test sees it in internal_errors()
            self.internal_error(f"{exchange.method} {exchange.target}")
            try:
                exchange.answer(Answer.of_error(internal_error("the loopback API server failed on this request")))
            except _Gone:
                pass

    def internal_error(self, what: str) -> None:
        """Keep the traceback of the exception being handled."""
        with self._lock:
            self._internal_errors.append(f"{what}\n{traceback.format_exc()}")

    def _receive(self, exchange: _Exchange) -> None:
        parsed = parse(next(self._serial), exchange.method, exchange.target)
        try:
            body = exchange.json_body()
        except KubeApiError as exc:
            exchange.answer(Answer.of_error(exc))
            return
        if isinstance(parsed, Answer):
            exchange.answer(parsed)
            return
        with self._lock:
            self._requests.append(parsed)
        self._serve(exchange, parsed, body, self.faults.pick(parsed))

    def _serve(self, exchange: _Exchange, request: RequestKey, body: Any, fault: Fault | None) -> None:
        if isinstance(fault, Pause) and fault.at == "received":
            self._hold(request, fault)
        if isinstance(fault, DropBefore):
            self.faults.record(request, fault, "dropped")
            exchange.drop()
            return
        if isinstance(fault, Refuse):
            self._answer(exchange, request, fault, self._refusal(fault, request, body))
            return
        if isinstance(fault, Delay):
            self._closing.wait(fault.seconds)
        try:
            outcome = apply(self.fake, request, exchange.content_type, body)
        except KubeApiError as exc:
            if fault is not None:
                self.faults.record(request, fault, "not-applied", f"{exc.status}: {exc.message}")
            self._answer(exchange, request, fault, Answer.of_error(exc))
            return
        if isinstance(outcome, WatchPlan):
            self._stream(exchange, request, outcome, fault)
            return
        if not self._applied(exchange, request, fault):
            return
        if isinstance(fault, CommitThenFail):
            outcome = self._commit_failure(fault, request, body)
        self._answer(exchange, request, fault, outcome)

    def _applied(self, exchange: _Exchange, request: RequestKey, fault: Fault | None) -> bool:
        """The request took effect: log it, hold it there for a pause, or close the connection
        for DropAfter (then False: nothing more is sent)."""
        if fault is not None:
            self.faults.record(request, fault, "applied")
        if isinstance(fault, Pause) and fault.at == "applied":
            self._hold(request, fault)
        if isinstance(fault, DropAfter):
            self.faults.record(request, fault, "dropped")
            exchange.drop()
            return False
        return True

    def _hold(self, request: RequestKey, pause: Pause) -> None:
        self.faults.record(request, pause, "blocked", pause.at)
        pause.hold(self._closing.is_set)
        self.faults.record(request, pause, "released", pause.at)

    def _answer(self, exchange: _Exchange, request: RequestKey, fault: Fault | None, answer: Answer) -> None:
        try:
            exchange.answer(answer)
        except _Gone:
            if fault is not None:
                self.faults.record(request, fault, "client-gone", str(answer.status))
            raise
        if fault is not None:
            self.faults.record(request, fault, "answered", str(answer.status))

    @staticmethod
    def _refusal(fault: Refuse, request: RequestKey, body: Any) -> Answer:
        if fault.status == 429:
            return _TOO_MANY
        if fault.status == 409:
            return Answer.of_error(retry_conflict(request, body))
        if fault.status == 500:
            return Answer.of_error(internal_error("injected by the loopback API server before applying the request"))
        if fault.status == 503:
            return Answer.of_error(service_unavailable("injected by the loopback API server before applying the request"))
        return Answer.of_error(timeout(HANDLER_TIMEOUT))

    @staticmethod
    def _commit_failure(fault: CommitThenFail, request: RequestKey, body: Any) -> Answer:
        if fault.status == 409:
            return Answer.of_error(retry_conflict(request, body))
        if fault.status == 500:
            return Answer.of_error(internal_error("injected by the loopback API server after applying the request"))
        return Answer.of_error(timeout(HANDLER_TIMEOUT))

    # --- watches ----------------------------------------------------------------------------------------
    def _stream(self, exchange: _Exchange, request: RequestKey, plan: WatchPlan, fault: Fault | None) -> None:
        if isinstance(fault, (Refuse, CommitThenFail)):  # nothing to commit: the watch is refused
            self._answer(exchange, request, fault, self._refusal(Refuse(fault.status), request, None))
            return
        exchange.start_stream()
        if not self._applied(exchange, request, fault):
            return
        sent = 0
        version = int(plan.resource_version or 0)
        limit = fault.after_events if isinstance(fault, (EndWatch, ExpireWatch)) else None
        try:
            for event in self._events(exchange, plan) if limit != 0 else ():
                exchange.chunk({"type": event.type, "object": typed(plan.resource, event.object)})
                version = int(event.object["metadata"]["resourceVersion"])
                sent += 1
                if sent == limit:
                    break
        except KubeApiError as exc:  # the history moved past this watch: the cacher's ERROR event
            exchange.chunk({"type": "ERROR", "object": status_of(exc).body()})
            exchange.end_stream()
            return
        if isinstance(fault, ExpireWatch):
            # as if the history were compacted up to now, past the last version this watch sent
            expired = too_old(version, int(self.fake.resource_version))
            exchange.chunk({"type": "ERROR", "object": status_of(expired).body()})
            self.faults.record(request, fault, "watch-expired", f"after {sent} events")
        elif isinstance(fault, EndWatch):
            self.faults.record(request, fault, "watch-ended", f"after {sent} events")
        exchange.end_stream()

    def _events(self, exchange: _Exchange, plan: WatchPlan) -> Iterator[WatchEvent]:
        """The fake's watch in short slices, so an idle watch notices a departed client or a
        closing server within `_WATCH_SLICE_S` (the fake's own stream only ends at its timeout)."""
        watch = self.fake.watch_pods if plan.resource == "pods" else self.fake.watch_nodes
        version = plan.resource_version
        if version is None:
            objects, version = self.fake.list_pods_and_version() if plan.resource == "pods" else self.fake.list_nodes_and_version()
            for obj in objects:
                yield WatchEvent("ADDED", obj)
        deadline = time.monotonic() + plan.timeout_s
        while not self._closing.is_set() and not exchange.client_gone():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            for event in watch(resource_version=version, stop_after_s=min(_WATCH_SLICE_S, remaining)):
                version = str(event.object["metadata"]["resourceVersion"])
                yield event


class _Exchange:
    """One request on one connection, as `LoopbackApiServer` needs it."""

    def __init__(self, handler: _Handler) -> None:
        self._handler = handler
        self.method = handler.command
        self.target = handler.path
        self.content_type = handler.headers.get("Content-Type", "")

    def json_body(self) -> Any:
        length = int(self._handler.headers.get("Content-Length") or 0)
        if length > REQUEST_BODY_LIMIT:
            self._handler.close_connection = True
            raise entity_too_large(REQUEST_BODY_LIMIT)
        raw = self._handler.rfile.read(length) if length else b""
        if len(raw) < length:
            raise _Gone()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"the object provided is unrecognized: couldn't get version/kind; json parse error: {exc}") from exc

    def answer(self, answer: Answer) -> None:
        if answer.text is not None:
            data, content_type = answer.text.encode(), "text/plain; charset=utf-8"
        else:
            data, content_type = json.dumps(answer.body).encode(), "application/json"
        try:
            handler = self._handler
            handler.send_response(answer.status)
            handler.send_header("Content-Type", content_type)
            for name, value in answer.headers:
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            handler.wfile.flush()
        except OSError as exc:
            raise _Gone() from exc

    def drop(self) -> None:
        """Close the connection without an answer (the client reads an end of stream)."""
        self._handler.close_connection = True
        try:
            self._handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def start_stream(self) -> None:
        try:
            self._handler.send_response(200)
            self._handler.send_header("Content-Type", "application/json")
            self._handler.send_header("Transfer-Encoding", "chunked")
            self._handler.end_headers()
            self._handler.wfile.flush()
        except OSError as exc:
            raise _Gone() from exc

    def chunk(self, event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        try:
            self._handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self._handler.wfile.flush()
        except OSError as exc:
            raise _Gone() from exc

    def end_stream(self) -> None:
        try:
            self._handler.wfile.write(b"0\r\n\r\n")
            self._handler.wfile.flush()
        except OSError as exc:
            raise _Gone() from exc

    def client_gone(self) -> bool:
        """Whether the client closed its end (a watch client sends nothing while it reads)."""
        conn = self._handler.connection
        try:
            readable, _, _ = select.select([conn], [], [], 0)
            return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as Go's net package does; else each answer waits ~40 ms for a delayed ACK
    server: _HttpServer

    def setup(self) -> None:
        super().setup()
        self.server.loopback.opened(self.connection)

    def finish(self) -> None:
        self.server.loopback.closed(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: tests read `requests()` and the fault log instead."""

    def _serve(self) -> None:
        self.server.loopback.serve(_Exchange(self))

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, loopback: LoopbackApiServer, port: int) -> None:
        self.loopback = loopback
        super().__init__(("127.0.0.1", port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke between requests is the client's business; anything else is
        kept for the test (`internal_errors`)."""
        if not isinstance(sys.exc_info()[1], OSError):
            self.loopback.internal_error(f"connection from {client_address}")
