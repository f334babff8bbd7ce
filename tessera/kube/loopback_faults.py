"""Faults the loopback API server injects, programmed at run time by the test or benchmark.

A rule is a fault, the requests it applies to (`Match`: verb, resource, subresource, namespace,
name; unset fields match anything) and which of those it fires on (`Nth`, `Every`, or `Chance`
with its own seeded generator, so a schedule replays exactly). Rules are tried in the order they
were added and a request gets at most one fault; each rule counts only the requests it is asked
about. Everything is thread-safe: rules are added, removed and read while requests are served.

Every step of a fault is kept in a log the test reads (`records`, `wait_for`): which request
(`RequestKey`, with a serial number per request), which fault, which stage, when
(`time.monotonic()`).
"""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

Verb = Literal["get", "list", "watch", "create", "update", "patch", "delete"]
PausePoint = Literal["received", "applied"]
Stage = Literal[
    "fired",  # the rule chose this request
    "blocked",  # a pause holds the request
    "released",  # the pause let it go on
    "applied",  # the request took effect on the store
    "not-applied",  # the request failed on its own (the store said no) while the fault was on it
    "answered",  # the fault's answer went out
    "dropped",  # the connection was closed without an answer
    "client-gone",  # the answer could not be written: the client had left
    "watch-ended",  # the watch stream was ended cleanly
    "watch-expired",  # the watch stream ended with an ERROR 410 Expired event
]


class FaultKind(Enum):
    REFUSE = "refuse"
    COMMIT_THEN_FAIL = "commit-then-fail"
    DROP_BEFORE = "drop-before"
    DROP_AFTER = "drop-after"
    DELAY = "delay"
    END_WATCH = "end-watch"
    EXPIRE_WATCH = "expire-watch"
    PAUSE = "pause"


@dataclass(frozen=True)
class RequestKey:
    """One request as faults see it. `subresource`, `namespace` and `name` are "" when absent."""

    serial: int
    verb: Verb
    resource: str
    subresource: str
    namespace: str
    name: str
    method: str
    path: str


@dataclass(frozen=True)
class Match:
    """Which requests a rule applies to; None matches anything. `subresource=""` matches only
    requests on the object itself (a PATCH of the pod, not of pods/binding)."""

    verb: Verb | None = None
    resource: str | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None

    def matches(self, request: RequestKey) -> bool:
        wanted = (self.verb, self.resource, self.subresource, self.namespace, self.name)
        actual = (request.verb, request.resource, request.subresource, request.namespace, request.name)
        return all(w is None or w == a for w, a in zip(wanted, actual))


@dataclass(frozen=True)
class Nth:
    """The n-th request the rule is asked about (1-based), once."""

    n: int

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"Nth.n: must be 1 or more, got {self.n}")


@dataclass(frozen=True)
class Every:
    """Every request the rule is asked about."""


@dataclass(frozen=True)
class Chance:
    """Each request with `probability`, drawn from a generator seeded with `seed`."""

    probability: float
    seed: int

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"Chance.probability: must be between 0 and 1, got {self.probability}")


Occurrence = Nth | Every | Chance
RefuseStatus = Literal[409, 429, 500, 503, 504]
CommitStatus = Literal[409, 500, 504]


@dataclass(frozen=True)
class Refuse:
    """Answer `status` without applying the request."""

    status: RefuseStatus
    kind: FaultKind = field(default=FaultKind.REFUSE, init=False)


@dataclass(frozen=True)
class CommitThenFail:
    """Apply the request, then answer `status`: 504 (the handler timed out while its write went
    through), 500, or 409 as a retry of a request that landed sees it."""

    status: CommitStatus
    kind: FaultKind = field(default=FaultKind.COMMIT_THEN_FAIL, init=False)


@dataclass(frozen=True)
class DropBefore:
    """Close the connection without answering, before applying the request."""

    kind: FaultKind = field(default=FaultKind.DROP_BEFORE, init=False)


@dataclass(frozen=True)
class DropAfter:
    """Apply the request, then close the connection without answering (a watch: after its
    headers, so the stream breaks off)."""

    kind: FaultKind = field(default=FaultKind.DROP_AFTER, init=False)


@dataclass(frozen=True)
class Delay:
    """Hold the request `seconds`, then apply it and answer if the connection is still open: the
    client may have timed out meanwhile, and the write lands after it gave up."""

    seconds: float
    kind: FaultKind = field(default=FaultKind.DELAY, init=False)


@dataclass(frozen=True)
class EndWatch:
    """End a watch stream cleanly after `after_events` events (watch requests only)."""

    after_events: int = 0
    kind: FaultKind = field(default=FaultKind.END_WATCH, init=False)


@dataclass(frozen=True)
class ExpireWatch:
    """End a watch stream with an ERROR event carrying 410 Expired after `after_events` events,
    as the watch cache ends a watch whose history was compacted (watch requests only)."""

    after_events: int = 0
    kind: FaultKind = field(default=FaultKind.EXPIRE_WATCH, init=False)


class Pause:
    """Block matching requests at `at` ("received": before anything happens; "applied": after
    the store changed, before the answer) until `release()`. `wait_blocked` tells the test one is
    held there, e.g. to SIGKILL the client at that point. A request blocked when the server
    closes goes on at once."""

    kind = FaultKind.PAUSE

    def __init__(self, at: PausePoint) -> None:
        self.at = at
        self._cond = threading.Condition()
        self._blocked = 0
        self._released = False

    @property
    def blocked(self) -> int:
        """How many requests this pause has held so far."""
        with self._cond:
            return self._blocked

    def wait_blocked(self, timeout_s: float, count: int = 1) -> bool:
        """True once `count` requests have been held here (within `timeout_s`)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._blocked >= count, timeout_s)

    def release(self) -> None:
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def hold(self, closing: Callable[[], bool]) -> None:
        """Called by the server: wait here until released or the server closes."""
        with self._cond:
            self._blocked += 1
            self._cond.notify_all()
            while not self._released and not closing():
                self._cond.wait(0.1)


Fault = Refuse | CommitThenFail | DropBefore | DropAfter | Delay | EndWatch | ExpireWatch | Pause


@dataclass(frozen=True)
class FaultRecord:
    seq: int
    at: float
    request: RequestKey
    fault: FaultKind
    stage: Stage
    detail: str = ""


class Rule:
    """A fault in force; `fired` counts the requests it took."""

    def __init__(self, fault: Fault, match: Match, when: Occurrence) -> None:
        self.fault = fault
        self.match = match
        self.when = when
        self._seen = 0
        self._fired = 0
        self._random = random.Random(when.seed) if isinstance(when, Chance) else None

    @property
    def fired(self) -> int:
        return self._fired

    def offer(self, request: RequestKey) -> bool:
        """Whether the rule fires on `request` (counting it when it matches); `Faults` calls this
        under its lock, one request at a time."""
        if not self.match.matches(request):
            return False
        if isinstance(self.fault, (EndWatch, ExpireWatch)) and request.verb != "watch":
            return False
        self._seen += 1
        if isinstance(self.when, Nth):
            hit = self._seen == self.when.n
        elif isinstance(self.when, Chance):
            assert self._random is not None
            hit = self._random.random() < self.when.probability
        else:
            hit = True
        if hit:
            self._fired += 1
        return hit


class Faults:
    """The rules of one loopback server and the log of what they did."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._rules: list[Rule] = []
        self._records: list[FaultRecord] = []
        self._closing = False

    def add(self, fault: Fault, match: Match | None = None, when: Occurrence | None = None) -> Rule:
        """Put `fault` in force for `match` (default: every request) on `when` (default: every
        request it matches)."""
        rule = Rule(fault, match or Match(), when or Every())
        with self._cond:
            self._rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        with self._cond:
            if rule in self._rules:
                self._rules.remove(rule)

    def clear(self) -> None:
        """Remove every rule and release every pause (the log stays)."""
        with self._cond:
            rules, self._rules = self._rules, []
        for rule in rules:
            if isinstance(rule.fault, Pause):
                rule.fault.release()

    def records(self) -> list[FaultRecord]:
        with self._cond:
            return list(self._records)

    def wait_for(self, predicate: Callable[[FaultRecord], bool], timeout_s: float) -> FaultRecord | None:
        """The first record `predicate` accepts, waiting up to `timeout_s` for it to be written."""
        found: list[FaultRecord] = []

        def seen() -> bool:
            found[:] = [r for r in self._records if predicate(r)][:1]
            return bool(found)

        with self._cond:
            self._cond.wait_for(seen, timeout_s)
        return found[0] if found else None

    # --- the server's side -------------------------------------------------------------------------
    def pick(self, request: RequestKey) -> Fault | None:
        with self._cond:
            for rule in self._rules:
                if rule.offer(request):
                    self._record(request, rule.fault.kind, "fired", "")
                    return rule.fault
        return None

    def record(self, request: RequestKey, fault: Fault, stage: Stage, detail: str = "") -> None:
        with self._cond:
            self._record(request, fault.kind, stage, detail)

    def _record(self, request: RequestKey, kind: FaultKind, stage: Stage, detail: str) -> None:
        self._records.append(FaultRecord(len(self._records), time.monotonic(), request, kind, stage, detail))
        self._cond.notify_all()

    @property
    def closing(self) -> bool:
        with self._cond:
            return self._closing

    def close(self) -> None:
        """The server is closing: pauses and delays stop holding requests."""
        with self._cond:
            self._closing = True
            rules = list(self._rules)
            self._cond.notify_all()
        for rule in rules:
            if isinstance(rule.fault, Pause):
                rule.fault.release()
