"""Tessera's HTTP/1.1 server: an event loop holds the connections, worker threads answer requests.

Why this shape (docs/scheduler-extender.md, "HTTP server" has the measurements): a thread per
connection lets slow or idle clients hold every thread. Here one thread (`selectors`, epoll on
Linux) owns every connection while it is idle, in its TLS handshake, receiving its request, or
waiting for its client to take a reply: that costs a socket and a bounded buffer. A request that
has arrived in full goes to a worker thread (`workers.py`), because the cores behind the
endpoints are synchronous and lock-guarded and /bind may block on the Kubernetes API; the
worker writes the reply itself when the socket takes it at once (nearly always), else the loop
finishes it. At the connection cap, the connection that has waited longest for its client is
closed to make room (`ConnectionLoop`), so no number of slow clients keeps a new one out.

Why not a third-party server: our cores hold their state in one process (two processes would
each sell the same GPU), so pre-fork servers (gunicorn) are out; uvicorn/h11 would run every call
in a thread pool anyway, around a second concurrency model; waitress has no TLS, which the
webhook needs with its certificate swapped live; cheroot has TLS but a thread per connection.
"""
from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus

from tessera.httpd.connection import Connection, Phase
from tessera.httpd.framing import Endpoint, HttpError, HttpLimits, Request, Response, body_length, body_reader, encode_reply
from tessera.httpd.head import Head
from tessera.httpd.jsonbody import error_body
from tessera.httpd.loop import ConnectionLoop

log = logging.getLogger(__name__)

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass(frozen=True)
class Routes:
    """What a server serves.

    lookup: URL path -> {method: endpoint}, or None for an unknown path (404). A path that
        exists without the request's method gets 405 with `Allow`. GET implies HEAD. Called on
        the event loop's thread: it must not block.
    observe: called once per answered request with (path, method, status, seconds), seconds
        from the request's last byte to its reply; None = off. Refusals decided from the head
        (404, 405, 413) are observed on the loop's thread, answers on the worker's.
    """

    lookup: Callable[[str], Mapping[str, Endpoint] | None]
    observe: Callable[[str, str, int, float], None] | None = None


class HardenedHTTPServer(ConnectionLoop):
    """HTTP/1.1 with keep-alive for every Tessera endpoint (extender, webhook, node /metrics).

    `tls`: serve HTTPS with this context. Handshakes run on the event loop, non-blocking, under
    the request timeout, so a client that never finishes one holds a socket and nothing else.
    Loading a new certificate into the context switches new connections to it.

    Lifecycle: `start()` runs the loop on a daemon thread; `serve_forever()` runs it and waits
    until `shutdown()` or `stop()`; `shutdown()` stops accepting (connections already open are
    still served); `stop(drain_s)` also drains and closes them.
    """

    def __init__(
        self, address: tuple[str, int], routes: Routes, limits: HttpLimits, *, tls: ssl.SSLContext | None = None, name: str = "http"
    ) -> None:
        self.routes = routes
        super().__init__(address, limits, tls=tls, name=name)

    # --- one request: decided on the loop from its head, answered on a worker ---------------------

    def on_head(self, conn: Connection, head: Head) -> bool:
        """Choose what answers the request, before its body is read: 404, 405 and framing
        errors are known from the head, and `Expect: 100-continue` is answered only when none
        applies. False when the connection had to be closed."""
        if head.version == "HTTP/0.9":
            raise HttpError(HTTPStatus.BAD_REQUEST, "HTTP/0.9 requests are not supported; send HTTP/1.1", close=True)
        path = head.target.partition("?")[0]
        methods = self.routes.lookup(path)
        refusal = None if methods is not None else HttpError(HTTPStatus.NOT_FOUND, f"no endpoint at {path[:200]!r}")
        try:
            length = body_length(head.headers, self.limits)
        except HttpError:
            if refusal is None:
                raise
            refusal.close = True  # the body cannot be skipped reliably
            raise refusal from None
        endpoint = None
        if methods is not None:
            allowed = dict(methods)
            if "GET" in allowed and "HEAD" not in allowed:
                allowed["HEAD"] = allowed["GET"]
            endpoint = allowed.get(head.method)
            if endpoint is None:
                allow = ", ".join(sorted(allowed))
                refusal = HttpError(
                    HTTPStatus.METHOD_NOT_ALLOWED, f"{head.method} is not allowed on {path[:200]!r}; use {allow}", headers=[("Allow", allow)]
                )
        if head.expect_continue:
            if refusal is not None:  # the client waits for a 100 before its body: never reading it, close
                refusal.close = True
                raise refusal
            if not conn.send_now(_CONTINUE):
                self.close(conn)  # a client that does not take 25 bytes is not reading at all
                return False
        conn.body = body_reader(length, self.limits)
        conn.endpoint = endpoint
        conn.refusal = refusal
        return True

    def on_request(self, conn: Connection, head: Head, body: bytes, received_at: float) -> None:
        """A request has arrived in full: answer a refusal decided from its head at once, hand
        anything else to a worker."""
        if conn.refusal is not None or conn.endpoint is None:
            self.refuse(conn, conn.refusal or HttpError(HTTPStatus.NOT_FOUND, "no endpoint"))
            return
        path, _, query = head.target.partition("?")
        request = Request(head.method, path, query, head.headers, body, received_at)
        self.hand_to_worker(conn, partial(self._answer, conn, conn.endpoint, request, head.keep_alive))

    def _answer(self, conn: Connection, endpoint: Endpoint, request: Request, keep_alive: bool) -> None:
        """On a worker: run the endpoint, write the reply (the loop finishes what the socket does
        not take at once), give the connection back to the loop."""
        close = not keep_alive
        try:
            started = time.perf_counter()
            try:
                response = endpoint(request)
            except HttpError as exc:
                close = close or exc.close
                response = Response(exc.status, error_body(exc.message, exc.path), headers=exc.headers)
            except Exception:  # a bug of ours, not the client's: say so, keep serving
                log.exception("%s: %s %s failed", self.name, request.method, request.path[:200])
                response = Response(HTTPStatus.INTERNAL_SERVER_ERROR, error_body(f"internal error answering {request.method} {request.path[:200]}"))
            if self.routes.observe is not None:  # before the write: a client's next request sees it
                self.routes.observe(request.path, request.method, response.status, time.perf_counter() - started)
            close = close or self.stopping
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s %s %s %s %d", self.name, conn.peer, request.method, request.path[:200], response.status)
            conn.out = encode_reply(response, self.date(), head_only=request.method == "HEAD", close=close)
            conn.close_after = close
            conn.send_from_worker()
        finally:
            self.hand_back(conn)

    def on_deadline(self, conn: Connection) -> None:
        if conn.phase is Phase.READING and conn.started:  # a request began and did not finish: say why
            timeout = HttpError(HTTPStatus.REQUEST_TIMEOUT, f"request not complete within {self.limits.request_timeout_s:g} s", close=True)
            self.refuse(conn, timeout, observed=False)
        else:  # silent, idle, a handshake or a reply not taken, or a linger over
            log.debug("%s: closing a connection from %s (%s) at its deadline", self.name, conn.peer, conn.phase.value)
            self.close(conn)

    def refuse(self, conn: Connection, exc: HttpError, *, observed: bool = True) -> None:
        """Answer `exc` from the loop: a head that cannot be served, a refusal decided from it,
        a request that timed out."""
        head = conn.head
        close = exc.close or head is None or not head.keep_alive or self.stopping
        if observed and head is not None and self.routes.observe is not None:
            self.routes.observe(head.target.partition("?")[0], head.method, exc.status, 0.0)
        response = Response(exc.status, error_body(exc.message, exc.path), headers=exc.headers)
        self.send_reply(conn, encode_reply(response, self.date(), head_only=head is not None and head.method == "HEAD", close=close), close)
