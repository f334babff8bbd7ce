"""The extender's HTTP adapter: decode kube-scheduler's JSON, call the core, encode the reply.

kube-scheduler POSTs JSON to `<urlPrefix>/<verb>` (kubernetes `pkg/scheduler/extender.go`,
`HTTPExtender.send`, v1.30 and master alike) and treats every status but 200 as the call failing
without reading the body: a failed filter leaves the pod unschedulable for this cycle (retried
with back-off), a failed bind sends it back to the queue. So a malformed request gets a 4xx, which
the operator sees in our log and metrics, and never a 200 with a guess. We route on the last path
segment so any `urlPrefix` works; `<prefix>/dra/prioritize` (the second extender entry of a stack
with dra pools, `tessera.scheduler.dra_scores`) is the one path where the segment before counts.

Error replies use the shape of `tessera.httpd.jsonbody` (`{"error": ..., "path": ...}`). The server
is `tessera.httpd.HardenedHTTPServer` (why: docs/scheduler-extender.md, "HTTP server").
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final, Protocol, TypeVar

from tessera.httpd import Endpoint, HardenedHTTPServer, HttpError, HttpLimits, Request, Response, Routes, json_response, parse_json
from tessera.httpd.prometheus import metrics_response
from tessera.scheduler.extender_types import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    WireError,
    host_priorities_json,
    unknown_fields,
)
from tessera.scheduler.metrics import ExtenderMetrics

log = logging.getLogger(__name__)

VERBS: Final = ("filter", "prioritize", "bind", "preempt")
_HEALTH: Final = ("healthz", "readyz", "livez")
_UNKNOWN_FIELD_NOTES: Final = 64  # distinct (verb, field) pairs logged; a bound, since clients pick the names
_NOTE_CHARS: Final = 100  # of a field name, kept and logged: 64 notes stay under 20 KiB whatever names a body carries
_Args = TypeVar("_Args")


@dataclass(frozen=True)
class ServerSettings:
    """How the extender listens. Limits: `tessera.httpd.HttpLimits` documents each.

    host: default 127.0.0.1 so nothing is exposed by accident; in-cluster it is set to 0.0.0.0.
    port: default 8888, the port the KubeSchedulerConfiguration snippet points at.
    max_body_bytes: default 8 MiB. A full-Nodes request for ~1000 nodes is 2-5 MiB; anything
        larger is refused with 413 before it is read, so one client cannot exhaust memory.
    """

    host: str = "127.0.0.1"
    port: int = 8888
    max_body_bytes: int = 8 * 1024 * 1024
    max_connections: int = 256
    backlog: int = 1024
    request_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0

    def limits(self) -> HttpLimits:
        return HttpLimits.of(self)


ELAPSED_HEADER: Final = "X-Tessera-Elapsed-Seconds"
_MAX_ELAPSED_S: Final = 60.0


def spent_before(request: Request) -> float:
    """Seconds a forwarding standby spent on the request before passing it on; 0 when absent or
    not a number in 0..60 (a client can only shorten its own budget with it)."""
    text = request.headers.get(ELAPSED_HEADER)
    try:
        value = float(text) if text is not None else 0.0
    except ValueError:
        return 0.0
    return value if 0.0 <= value <= _MAX_ELAPSED_S else 0.0


class VerbRouter(Protocol):
    def route(self, verb: str, local: Endpoint) -> Endpoint: ...


class ExtenderCore(Protocol):
    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult: ...
    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]: ...
    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult: ...
    def preempt(self, args: ExtenderPreemptionArgs, deadline: float | None = None) -> ExtenderPreemptionResult: ...
    def preempt_deadline(self, received_at: float) -> float: ...
    def health(self) -> tuple[bool, str]: ...
    def refresh_metrics(self, metrics: ExtenderMetrics) -> None: ...


class DraPrioritizer(Protocol):
    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]: ...


DRA_PRIORITIZE: Final = "dra/prioritize"


def _last_segment(path: str) -> str:
    """The endpoint a path names: its last segment, or `dra/prioritize`."""
    parts = path.rstrip("/").rsplit("/", 2)
    if parts[-2:] == ["dra", "prioritize"]:
        return DRA_PRIORITIZE
    return parts[-1]


# The verbs kube-scheduler may be configured to call (filterVerb, prioritizeVerb, bindVerb,
# preemptVerb); `tessera scheduler --help` lists them from here.
POST_VERBS: Final = ("filter", "prioritize", "bind", "preempt")


class ExtenderHttpServer:
    """A running extender endpoint; `port` is the bound port (useful with port 0 in tests)."""

    def __init__(
        self,
        core: ExtenderCore,
        settings: ServerSettings,
        metrics: ExtenderMetrics | None = None,
        *,
        router: VerbRouter | None = None,
        dra: DraPrioritizer | None = None,
    ) -> None:
        """`router`: decides per request whether this replica answers a verb or passes it to the
        leader (`tessera.scheduler.routing`); None: this process answers everything. `dra`: serves
        `/dra/prioritize` (every replica answers it: it reads the API, not the leader's cache)."""
        self.metrics = metrics or ExtenderMetrics()
        self._core = core
        self._noted: set[tuple[str, str]] = set()
        self._noted_lock = threading.Lock()
        post: dict[str, Endpoint] = {
            "filter": self._verb("filter", ExtenderArgs.from_json, ExtenderArgs.FIELDS, lambda a: core.filter(a).to_json_bytes()),
            "prioritize": self._verb("prioritize", ExtenderArgs.from_json, ExtenderArgs.FIELDS, lambda a: host_priorities_json(core.prioritize(a))),
            "bind": self._verb("bind", ExtenderBindingArgs.from_json, ExtenderBindingArgs.FIELDS, lambda a: core.bind(a).to_json()),
            # the budget runs from the request's first byte: decoding and the search share it
            "preempt": self._timed_verb(
                "preempt", ExtenderPreemptionArgs.from_json, ExtenderPreemptionArgs.FIELDS, lambda a, d: core.preempt(a, d).to_json(), core.preempt_deadline
            ),
        }
        if router is not None:
            post = {verb: router.route(verb, endpoint) for verb, endpoint in post.items()}
        self._endpoints: dict[str, Mapping[str, Endpoint]] = {
            **{verb: {"POST": post[verb]} for verb in POST_VERBS},
            "metrics": {"GET": self._metrics},
            **{name: {"GET": self._health} for name in _HEALTH},
        }
        if dra is not None:
            prioritize = dra.prioritize
            self._endpoints[DRA_PRIORITIZE] = {
                "POST": self._verb(DRA_PRIORITIZE, ExtenderArgs.from_json, ExtenderArgs.FIELDS, lambda a: host_priorities_json(prioritize(a)))
            }
        self._server = HardenedHTTPServer(
            (settings.host, settings.port), Routes(self._lookup, self._observe), settings.limits(), name="extender"
        )
        self._thread: threading.Thread | None = None

    # --- routing ---------------------------------------------------------------------------------

    def _lookup(self, path: str) -> Mapping[str, Endpoint] | None:
        return self._endpoints.get(_last_segment(path))

    def _observe(self, path: str, method: str, status: int, seconds: float) -> None:
        verb = _last_segment(path)
        label = verb if verb in self._endpoints else "unknown"  # bounded label values
        self.metrics.requests.labels(label, str(status)).inc()
        if label in VERBS or label == DRA_PRIORITIZE:
            self.metrics.latency.labels(label).observe(seconds)

    def _verb(
        self, verb: str, decode: Callable[[Any], _Args], fields: tuple[str, ...], call: Callable[[_Args], Any]
    ) -> Endpoint:
        def endpoint(request: Request) -> Response:
            body = parse_json(request.body)
            try:
                args = decode(body)
            except WireError as exc:
                raise HttpError(HTTPStatus.BAD_REQUEST, f"{verb}: {exc}", path=exc.path) from None
            self._note_unknown(verb, unknown_fields(body, fields))
            result = call(args)
            return Response(HTTPStatus.OK, result) if isinstance(result, bytes) else json_response(HTTPStatus.OK, result)

        return endpoint

    def _timed_verb(
        self,
        verb: str,
        decode: Callable[[Any, float], _Args],
        fields: tuple[str, ...],
        call: Callable[[_Args, float], Any],
        deadline_of: Callable[[float], float],
    ) -> Endpoint:
        """`_verb` for a verb with a time budget: `deadline_of(request.received_at)` goes to the
        decoding and to the call. A request a standby passed on carries the time it already spent
        (`ELAPSED_HEADER`), which comes off the budget here."""
        def endpoint(request: Request) -> Response:
            deadline = deadline_of(request.received_at - spent_before(request))
            return self._verb(verb, lambda body: decode(body, deadline), fields, lambda args: call(args, deadline))(request)

        return endpoint

    def _note_unknown(self, verb: str, names: list[str]) -> None:
        """Fields we do not know are ignored (a newer kube-scheduler may add some); say so once
        per field, so an operator can tell when the extender should learn one."""
        for name in names:
            name = name[:_NOTE_CHARS]
            with self._noted_lock:
                if (verb, name) in self._noted or len(self._noted) >= _UNKNOWN_FIELD_NOTES:
                    continue
                self._noted.add((verb, name))
            log.info("%s: ignoring field %r that this extender does not know (kube-scheduler newer than Tessera?)", verb, name)

    def _health(self, request: Request) -> Response:
        ok, message = self._core.health()
        return Response(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, (message + "\n").encode(), "text/plain; charset=utf-8")

    def _metrics(self, request: Request) -> Response:
        self._core.refresh_metrics(self.metrics)
        return metrics_response(self.metrics.registry, request)

    # --- lifecycle -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return f"http://{self._server.server_address[0]!s}:{self.port}"

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def start(self) -> None:
        """Serve on a background thread (tests, --simulate)."""
        self._thread = self._server.start()

    def shutdown(self, drain_s: float = 5.0) -> None:
        """Stop accepting; requests in progress finish (up to `drain_s`), idle connections close."""
        started = time.monotonic()
        self._server.stop(drain_s)
        if self._thread is not None:
            self._thread.join(timeout=max(0.1, drain_s - (time.monotonic() - started)))
