"""Which replica answers kube-scheduler: the leader does; a standby passes the request on to it.

kube-scheduler reaches the extender through its Service, which balances over every ready replica
(each has synced its cache). Only the leader holds the in-flight reservations and may bind, so only
its answers are right for /filter, /prioritize, /preempt and /bind alike: a standby forwards the
request body as it came to the leader's URL (from the Lease) and relays the answer. During a
handover (no leader known, or the leader unreachable) a request waits up to `hold_s` for one; if
none appears it gets the answer kube-scheduler retries, not an error status:

- /filter and /bind: `Error` set (the pod is tried again in its next scheduling cycle);
- /prioritize: no scores (kube-scheduler adds nothing for this extender);
- /preempt: no victims (this preemption attempt fails; it is tried again).

A request that was forwarded once is never forwarded again (header `X-Tessera-Forwarded-By`), so
two replicas that each believe the other leads cannot pass a request back and forth: a replica
that no longer leads answers a forwarded request with 421 Misdirected Request, and the standby that
sent it looks for the new leader (the Lease changes hands within a retry period of a release).
"""
from __future__ import annotations

import http.client
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final
from urllib.parse import urlsplit

from tessera.httpd import Endpoint, Request, Response, json_bytes
from tessera.httpd.jsonbody import error_body
from tessera.scheduler.http_server import ELAPSED_HEADER
from tessera.scheduler.leader import Leader
from tessera.scheduler.metrics import ExtenderMetrics

log = logging.getLogger(__name__)

FORWARDED_HEADER: Final = "X-Tessera-Forwarded-By"
_IDLE_CONNECTIONS: Final = 8  # kept-alive connections to the leader per standby


@dataclass(frozen=True)
class RoutingSettings:
    """hold_s: default 2 s: how long a request waits for a leader during a handover (kube-scheduler's
        extender timeout is 5 s by default; the forwarded call needs the rest).
    forward_timeout_s: default 2.5 s for the leader to answer a forwarded request.
    """

    hold_s: float = 2.0
    forward_timeout_s: float = 2.5


def no_leader_reply(verb: str, reason: str) -> Response:
    """What kube-scheduler retries for `verb` (module docstring)."""
    message = f"tessera: {reason}; kube-scheduler will retry"
    if verb == "prioritize":
        return Response(HTTPStatus.OK, b"[]")
    if verb == "preempt":
        return Response(HTTPStatus.OK, json_bytes({"NodeNameToMetaVictims": {}}))
    if verb == "filter":
        return Response(HTTPStatus.OK, json_bytes({"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}))
    return Response(HTTPStatus.OK, json_bytes({"Error": message}))


class _Pool:
    """Kept-alive HTTP connections to one leader URL."""

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        self.url = url
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._timeout_s = timeout_s
        self._idle: queue.LifoQueue[http.client.HTTPConnection] = queue.LifoQueue(_IDLE_CONNECTIONS)

    def post(self, path: str, body: bytes, identity: str, elapsed_s: float) -> tuple[int, str, bytes]:
        try:
            connection = self._idle.get_nowait()
        except queue.Empty:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        try:
            headers = {"Content-Type": "application/json", FORWARDED_HEADER: identity, ELAPSED_HEADER: f"{elapsed_s:.6f}"}
            connection.request("POST", path, body, headers)
            reply = connection.getresponse()
            data = reply.read()
        except BaseException:
            connection.close()
            raise
        if reply.will_close:
            connection.close()
        else:
            try:
                self._idle.put_nowait(connection)
            except queue.Full:
                connection.close()
        return reply.status, reply.getheader("Content-Type", "application/json"), data

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


class LeaderRouter:
    """Wraps each verb's endpoint: run it here when this replica leads, else forward it."""

    def __init__(
        self,
        identity: str,
        is_serving: Callable[[], bool],
        wait_for_leader: Callable[[float], Leader | None],
        metrics: ExtenderMetrics,
        settings: RoutingSettings | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`is_serving()`: this replica leads and takes new requests (false while it hands over)."""
        self._identity = identity
        self._is_serving = is_serving
        self._wait_for_leader = wait_for_leader
        self._metrics = metrics
        self._settings = settings or RoutingSettings()
        self._monotonic = monotonic
        self._pools: dict[str, _Pool] = {}
        self._lock = threading.Lock()
        self._busy = 0
        self._idle = threading.Condition(self._lock)

    def route(self, verb: str, local: Endpoint) -> Endpoint:
        def endpoint(request: Request) -> Response:
            if request.headers.get(FORWARDED_HEADER) is not None:
                # the sender took us for the leader: answer only if we are, never pass it on
                if self._is_serving():
                    return self._local(local, request)
                return Response(HTTPStatus.MISDIRECTED_REQUEST, error_body(f"{verb}: this extender replica does not lead; ask the leader"))
            deadline = request.received_at + self._settings.hold_s
            while True:
                if self._is_serving():
                    return self._local(local, request)
                leader = self._wait_for_leader(max(0.0, deadline - self._monotonic()))
                if leader is not None and leader.identity != self._identity and leader.url is not None:
                    try:
                        elapsed = self._monotonic() - request.received_at  # /preempt's budget covers the hop too
                        status, content_type, body = self._pool(leader.url).post(request.path, request.body, self._identity, elapsed)
                    except (OSError, http.client.HTTPException) as exc:
                        status, content_type, body = 0, "", str(exc).encode()
                    if status not in (0, HTTPStatus.MISDIRECTED_REQUEST):
                        self._metrics.forwarded.labels(verb, "ok").inc()
                        return Response(status, body, content_type)
                    log.info("forwarding %s to the leader at %s failed: %s", verb, leader.url, body[:200].decode(errors="replace"))
                    if self._monotonic() < deadline:
                        time.sleep(0.05)  # the leader is changing: look again
                        continue
                    self._metrics.forwarded.labels(verb, "failed").inc()
                    return no_leader_reply(verb, f"the extender leader at {leader.url} did not take the request")
                if self._monotonic() < deadline:
                    time.sleep(0.01)  # this replica itself is getting ready to lead
                    continue
                self._metrics.forwarded.labels(verb, "no_leader").inc()
                if leader is not None and leader.url is None and leader.identity != self._identity:
                    return no_leader_reply(verb, f"the extender leader {leader.identity} advertises no address")
                return no_leader_reply(verb, "no extender leader is elected right now (a handover is in progress)")

        return endpoint

    def _local(self, local: Endpoint, request: Request) -> Response:
        with self._lock:
            self._busy += 1
        try:
            return local(request)
        finally:
            with self._idle:
                self._busy -= 1
                if not self._busy:
                    self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request runs locally (a leader handing over lets its binds finish)."""
        deadline = self._monotonic() + timeout_s
        with self._idle:
            while self._busy:
                left = deadline - self._monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    def _pool(self, url: str) -> _Pool:
        with self._lock:
            pool = self._pools.get(url)
            if pool is None:
                for old in self._pools.values():
                    old.close()
                pool = self._pools[url] = _Pool(url, self._settings.forward_timeout_s)
            return pool

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()
