"""The standard library's threading HTTP server, configured for hostile and bursty clients.

Why not a third-party server: our cores are synchronous, guarded by locks and hold their state
in one process (the extender's reservations must not be split over workers: two processes would
each sell the same GPU), so pre-fork servers (gunicorn) are out and an asyncio server
(uvicorn/h11) would run every call in a thread pool anyway. waitress has no TLS, which the webhook
needs (with its certificate swapped live); cheroot has TLS, but adds a dependency to every image
for what the few settings below give: a thread per connection up to `max_connections`, a listen
backlog, one deadline per request against slow clients, an idle timeout above Go's, bounded and
well-framed bodies, JSON errors for every failure (the stdlib answers some with HTML or 501), 405
with `Allow`, and a drain on shutdown. docs/scheduler-extender.md ("HTTP server") has the rest.
"""
from __future__ import annotations

import logging
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedReader
from typing import Any

from tessera.httpd.framing import (
    DeadlineReader,
    HttpError,
    HttpLimits,
    Request,
    RequestTimeout,
    Response,
    body_length,
    read_body,
)
from tessera.httpd.jsonbody import error_body

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Response]
_MAX_REQUEST_LINE = 65536  # the stdlib's own bound, answered with 414 here instead of its HTML


@dataclass(frozen=True)
class Routes:
    """What a server serves.

    lookup: URL path -> {method: endpoint}, or None for an unknown path (404). A path that
        exists without the request's method gets 405 with `Allow`. GET implies HEAD.
    observe: called once per answered request with (path, method, status, seconds); None = off.
    """

    lookup: Callable[[str], Mapping[str, Endpoint] | None]
    observe: Callable[[str, str, int, float], None] | None = None


class _Connection:
    """Bookkeeping the server keeps per open connection, for reaping idle ones and draining."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.idle_since: float | None = None
        self.closed_by_server = False
        self.lock = threading.Lock()

    def cut(self) -> None:
        """Make a blocked read on this connection return (EOF) from another thread. The plain
        socket's shutdown, even for TLS: the SSL object belongs to the connection's thread."""
        self.closed_by_server = True
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass  # already gone


# how long a closing connection keeps discarding the client's unread bytes (see shutdown_request)
_LINGER_S = 1.0


def _linger(sock: socket.socket) -> None:
    """Discard input until the client closes or `_LINGER_S` passes; returns at once when nothing
    is pending (the common case: the client read the reply and closes its end)."""
    deadline = time.monotonic() + _LINGER_S
    try:
        if not socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
            return  # the client closed its end: nothing to discard
    except BlockingIOError:
        return  # nothing unread: closing cannot reset anything
    except OSError:
        return
    while (left := deadline - time.monotonic()) > 0:
        try:
            socket.socket.settimeout(sock, left)
            if not socket.socket.recv(sock, 65536):
                return
        except OSError:
            return


class HardenedHTTPServer(ThreadingHTTPServer):
    """HTTP/1.1 with keep-alive, one thread per connection up to `limits.max_connections`.

    `tls`: serve HTTPS with this context; the handshake runs in the connection's thread under the
    request timeout, so a client that never finishes it holds only its own connection. Loading a
    new certificate into the context switches new connections to it.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], routes: Routes, limits: HttpLimits, *, tls: ssl.SSLContext | None = None, name: str = "http"
    ) -> None:
        self.routes = routes
        self.limits = limits
        self.name = name
        self.request_queue_size = limits.backlog  # read by server_activate() inside __init__
        self._slots = threading.BoundedSemaphore(limits.max_connections)
        self._connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._serving = threading.Event()
        super().__init__(address, _Handler)  # type: ignore[arg-type]  # built by _serve_connection
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def serve_forever(self, poll_interval: float = 0.05) -> None:
        self._serving.set()
        try:
            super().serve_forever(poll_interval)
        finally:
            self._serving.clear()

    def start(self) -> threading.Thread:
        """Serve on a daemon thread (tests, --simulate, the node agent)."""
        thread = threading.Thread(target=self.serve_forever, name=f"{self.name}-accept", daemon=True)
        thread.start()
        return thread

    # --- connections -----------------------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        # Blocking here keeps later connections in the kernel's listen backlog (they wait, they are
        # not refused). Every turn without a free slot closes the longest-idle keep-alive connection.
        while not self._slots.acquire(timeout=0.05):
            if self._stopping.is_set():
                self.shutdown_request(request)
                return
            self._reap_idle(1)
        connection = _Connection(request)
        with self._lock:
            self._connections.add(connection)
        thread = threading.Thread(target=self._serve_connection, args=(request, client_address, connection), daemon=True)
        thread.name = f"{self.name}-conn"
        try:
            thread.start()
        except RuntimeError:  # cannot start a thread (resource limit): refuse this one, keep serving
            self._forget(connection)
            self.shutdown_request(request)

    def _serve_connection(self, request: Any, client_address: Any, connection: _Connection) -> None:
        try:
            _Handler(request, client_address, self, connection)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._forget(connection)

    def shutdown_request(self, request: Any) -> None:
        """Close a connection without losing the reply just written: when the client's bytes are
        still unread (a body we refused with 413, a request cut by a framing error), closing at
        once makes the kernel answer them with a reset, which can destroy the reply in flight
        before the client reads it. So: stop writing, discard what arrives for a short while (the
        "lingering close" of RFC 9112 section 9.6), then close."""
        try:
            socket.socket.shutdown(request, socket.SHUT_WR)
        except OSError:
            pass  # already gone
        else:
            _linger(request)
        self.close_request(request)

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)
        self._slots.release()

    def _reap_idle(self, count: int | None) -> int:
        """Close up to `count` (None: all) kept-alive connections that wait for a request."""
        with self._lock:
            idle = sorted((c for c in self._connections if c.idle_since is not None), key=lambda c: c.idle_since or 0.0)
        reaped = 0
        for connection in idle[: count if count is not None else len(idle)]:
            with connection.lock:
                if connection.idle_since is None:
                    continue  # a request arrived meanwhile
                connection.cut()
            reaped += 1
        return reaped

    def active_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that vanishes (reset, EOF in the TLS handshake, silence) is its own problem and
        # routine (TCP probes, load generators stopping): debug. Anything else, such as a client
        # rejecting our certificate, is one warning line, not the stdlib's traceback on stderr.
        exc = sys.exc_info()[1]
        host = client_address[0] if isinstance(client_address, tuple) and client_address else "?"
        routine = isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLEOFError))
        log.log(logging.DEBUG if routine else logging.WARNING, "%s: connection from %s failed: %s", self.name, host, exc)

    # --- stopping --------------------------------------------------------------------------------

    def stop(self, drain_s: float = 5.0) -> None:
        """Stop accepting, let requests in progress finish (up to `drain_s`), close the rest.
        Replies sent meanwhile say `Connection: close`; idle keep-alive connections are closed
        at once."""
        self._stopping.set()
        if self._serving.is_set():
            self.shutdown()
        self.server_close()
        deadline = time.monotonic() + drain_s
        while self.active_connections() and time.monotonic() < deadline:
            self._reap_idle(None)
            time.sleep(0.01)
        with self._lock:
            remaining = list(self._connections)
        for connection in remaining:
            connection.cut()


class _Handler(BaseHTTPRequestHandler):
    server: HardenedHTTPServer
    rfile: BufferedReader  # type: ignore[assignment]  # ours reads under the request deadline
    protocol_version = "HTTP/1.1"
    # Replies go out in one write, but a client's delayed ACK still stalls the next one with
    # Nagle on (~40 ms per reply on Linux).
    disable_nagle_algorithm = True
    server_version = "tessera"
    sys_version = ""

    def __init__(self, request: Any, client_address: Any, server: HardenedHTTPServer, connection: _Connection) -> None:
        self._connection = connection
        self._expect_continue = False
        self._body_read = False
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        sock: socket.socket = self.request
        self.connection = sock
        limits = self.server.limits
        if isinstance(sock, ssl.SSLSocket):
            sock.settimeout(limits.request_timeout_s)
            sock.do_handshake()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self._reader = DeadlineReader(sock, limits)
        self.rfile = BufferedReader(self._reader, 65536)

    def finish(self) -> None:
        self.rfile.close()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s " + format, self.server.name, self.address_string(), *args)

    # --- one request -----------------------------------------------------------------------------

    def handle_one_request(self) -> None:
        self.requestline, self.request_version, self.command = "", "HTTP/1.1", ""
        self._expect_continue = self._body_read = False
        try:
            if not self._await_request():
                self.close_connection = True
                return
            self.raw_requestline = self.rfile.readline(_MAX_REQUEST_LINE + 1)
            if len(self.raw_requestline) > _MAX_REQUEST_LINE:
                self._reply_error(HTTPStatus.REQUEST_URI_TOO_LONG, f"request line longer than {_MAX_REQUEST_LINE} bytes", close=True)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():  # answered through send_error
                return
            self._dispatch()
        except RequestTimeout as exc:
            if self._reader.started:  # a request began and did not finish: say why we close
                try:
                    self._reply_error(HTTPStatus.REQUEST_TIMEOUT, str(exc), close=True)
                except OSError:
                    self.close_connection = True
            else:  # a new connection that never spoke: just close, as for an idle one
                self.close_connection = True
        except (TimeoutError, ConnectionError, ssl.SSLError) as exc:
            log.debug("%s: connection from %s ended: %s", self.server.name, self.client_address[0], exc)
            self.close_connection = True
        finally:
            self._reader.next_request()

    def _await_request(self) -> bool:
        """Wait for the next request's first byte (False: the client closed, or the server cut
        this idle connection to make room or to stop)."""
        if self.server.stopping:
            return False
        with self._connection.lock:
            self._connection.idle_since = time.monotonic()
        try:
            ready = bool(self.rfile.peek(1))
        finally:
            with self._connection.lock:
                self._connection.idle_since = None
        return ready and not self._connection.closed_by_server

    def handle_expect_100(self) -> bool:
        # Decided in _dispatch, once the path, method and length are known to be acceptable.
        self._expect_continue = True
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own rejections (bad request line, header too long, too many headers) in
        our JSON shape. 505 for an HTTP/2 request line becomes 400: every client error is 4xx."""
        status = HTTPStatus.BAD_REQUEST if code >= 500 else HTTPStatus(code)
        reason = message or HTTPStatus(code).phrase
        if explain and explain not in reason:
            reason = f"{reason}: {explain}"
        self._reply_error(status, reason, close=True)

    def _dispatch(self) -> None:
        started = time.perf_counter()
        path, _, query = self.path.partition("?")
        method = self.command
        try:
            response = self._respond(method, path, query)
        except HttpError as exc:
            self._finish_unread_body(exc)
            if exc.close:
                self.close_connection = True
            response = Response(exc.status, error_body(exc.message, exc.path), headers=exc.headers)
        if self.server.routes.observe is not None:  # before the write: a client's next request sees it
            self.server.routes.observe(path, method, response.status, time.perf_counter() - started)
        self._write(response, head_only=method == "HEAD")

    def _respond(self, method: str, path: str, query: str) -> Response:
        if self.request_version == "HTTP/0.9":
            raise HttpError(HTTPStatus.BAD_REQUEST, "HTTP/0.9 requests are not supported; send HTTP/1.1", close=True)
        methods = self.server.routes.lookup(path)
        if methods is None:
            raise HttpError(HTTPStatus.NOT_FOUND, f"no endpoint at {path[:200]!r}")
        allowed = dict(methods)
        if "GET" in allowed and "HEAD" not in allowed:
            allowed["HEAD"] = allowed["GET"]
        length = body_length(self.headers, self.server.limits)
        endpoint = allowed.get(method)
        if endpoint is None:
            allow = ", ".join(sorted(allowed))
            raise HttpError(
                HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {path[:200]!r}; use {allow}", headers=[("Allow", allow)]
            )
        if self._expect_continue:
            self.connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            self._expect_continue = False
        body = read_body(self.rfile, length, self.server.limits)
        self._body_read = True
        try:
            return endpoint(Request(method, path, query, self.headers, body))
        except HttpError:
            raise
        except Exception:  # a bug of ours, not the client's: say so, keep serving
            log.exception("%s: %s %s failed", self.server.name, method, path[:200])
            return Response(HTTPStatus.INTERNAL_SERVER_ERROR, error_body(f"internal error answering {method} {path[:200]}"))

    def _finish_unread_body(self, exc: HttpError) -> None:
        """Before an early error reply, read the body so the connection can be reused; where
        that is unsafe or pointless (bad framing, 100-continue not sent, oversized) close."""
        if self._body_read:
            return
        if exc.close or self._expect_continue:
            exc.close = True
            return
        try:
            length = body_length(self.headers, self.server.limits)
            read_body(self.rfile, length, self.server.limits)
        except HttpError:
            exc.close = True

    # --- replies ---------------------------------------------------------------------------------

    def _reply_error(
        self, status: HTTPStatus, message: str, *, path: str | None = None, close: bool = False, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        if close:
            self.close_connection = True
        self._write(Response(status, error_body(message, path), headers=headers), head_only=getattr(self, "command", "") == "HEAD")

    def _write(self, response: Response, *, head_only: bool = False) -> None:
        if self.server.stopping:
            self.close_connection = True
        status = HTTPStatus(response.status)
        lines = [
            f"HTTP/1.1 {status.value} {status.phrase}",
            f"Server: {self.server_version}",
            f"Date: {self.date_time_string()}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
        ]
        lines += [f"{name}: {value}" for name, value in response.headers]
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.connection.settimeout(self.server.limits.request_timeout_s)
        # One write: headers and body in one segment, one syscall, one release of the GIL.
        self.connection.sendall(head if head_only else head + response.body)
        self.log_request(status.value, len(response.body))
