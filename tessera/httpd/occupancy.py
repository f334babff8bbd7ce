"""Which connections the event loop holds, where each stands in the order in which they are closed
to make room, and when each is due.

A connection waits in one of four places (`Place`), oldest first:

- REQUEST: the client owes us a request (or the rest of its TLS handshake, or of its request).
  The wait starts when the connection opens or when a kept-alive connection's next request
  begins; bytes of a request arriving do not restart it, so a client trickling its request ages
  like a silent one.
- IDLE: a kept-alive connection between requests.
- REPLY: a reply the client has not taken yet; the wait restarts whenever it takes some.
- CLOSING: answered, discarding the client's unread bytes (lingering close).

A connection whose request a worker is answering has no place: it is never closed to make room.
To make room, a lingering connection goes first, else whichever has waited longest among those
that have waited longer than their place's grace (`_GRACE_S`; the request's is set per server,
`HttpLimits.request_grace_s`).

Deadlines sit in a heap; moving a connection's deadline leaves its old entry behind, skipped
when it comes up and dropped when the heap outgrows the connections.
"""
from __future__ import annotations

import enum
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Iterator
from types import MappingProxyType
from typing import Final

from tessera.httpd.connection import Connection


class Place(enum.Enum):
    REQUEST = "request"
    IDLE = "idle"
    REPLY = "reply"
    CLOSING = "closing"


# How long a connection must have waited in each place before it may be closed to make room
# (REQUEST: the default; a server may set its own, `HttpLimits.request_grace_s`).
_GRACE_S: Final = MappingProxyType(
    {
        # Ample for a well-behaved client to send its request (or finish its TLS handshake)
        # after connecting, even from a process busy with a hundred threads (the bursts in
        # tests/tessera/httpd: 20 ms at most on a quiet 2-core VM).
        Place.REQUEST: 0.1,
        # A client that reuses its kept-alive connection at once (kube-scheduler between
        # filter, prioritize and bind; a burst) never has it closed under its next request.
        Place.IDLE: 0.25,
        # A client reading a large reply (a /metrics scrape) from a busy process gets a pause.
        Place.REPLY: 0.5,
        # Answered already: the lingering close only protects the reply in flight.
        Place.CLOSING: 0.0,
    }
)


class Occupancy:
    """The loop's connections; used from the loop's thread only (`len` from any)."""

    def __init__(self, request_grace_s: float | None = None) -> None:
        self._grace = dict(_GRACE_S) | ({} if request_grace_s is None else {Place.REQUEST: request_grace_s})
        self._conns: set[Connection] = set()
        self._answering: set[Connection] = set()  # in no place: a worker answers them
        self._places: dict[Place, OrderedDict[Connection, None]] = {p: OrderedDict() for p in Place}
        self._timers: list[tuple[float, int, Connection]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._conns)

    def __contains__(self, conn: Connection) -> bool:
        return conn in self._conns

    def held(self) -> int:
        """Connections that count against the cap: all but those whose worker is done with
        them and will have them closed (`Connection.finished`)."""
        return len(self._conns) - sum(1 for c in self._answering if c.finished)

    def all(self) -> list[Connection]:
        return list(self._conns)

    def add(self, conn: Connection, now: float, deadline: float) -> None:
        self._conns.add(conn)
        self.place(conn, Place.REQUEST, now)
        self.set_deadline(conn, deadline)

    def remove(self, conn: Connection) -> None:
        self._conns.discard(conn)
        self.place(conn, None, 0.0)
        self._answering.discard(conn)
        conn.deadline = None

    def place(self, conn: Connection, place: Place | None, now: float) -> None:
        """Put `conn` at the end of `place` (None: out of the order), its wait starting `now`."""
        for where, conns in self._places.items():
            if where is not place:
                conns.pop(conn, None)
        if place is None:
            if conn in self._conns:
                self._answering.add(conn)
            return
        self._answering.discard(conn)
        conns = self._places[place]
        conns.pop(conn, None)
        conns[conn] = None
        conn.waiting_since = now

    def evictee(self, now: float) -> Connection | None:
        """The connection to close to make room: a lingering one, else the one that has waited
        longest among those past their grace; None when none may be closed now."""
        closing = self._places[Place.CLOSING]
        if closing:
            return next(iter(closing))
        past = [c for c, place in self._oldest() if now - c.waiting_since >= self._grace[place]]
        return min(past, key=lambda c: c.waiting_since) if past else None

    def next_evictable_at(self) -> float | None:
        """When some connection may be closed to make room, if none may now."""
        return min((c.waiting_since + self._grace[place] for c, place in self._oldest()), default=None)

    def _oldest(self) -> list[tuple[Connection, Place]]:
        return [(next(iter(conns)), place) for place, conns in self._places.items() if conns]

    # --- deadlines --------------------------------------------------------------------------------

    def set_deadline(self, conn: Connection, when: float | None) -> None:
        conn.deadline = when
        if when is None:
            return
        heapq.heappush(self._timers, (when, next(self._order), conn))
        if len(self._timers) > 4 * len(self._conns) + 1024:
            self._timers = [(c.deadline, next(self._order), c) for c in self._conns if c.deadline is not None]
            heapq.heapify(self._timers)

    def next_deadline(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    def due(self, now: float) -> Iterator[Connection]:
        """The connections whose deadline has passed, each once; their deadline is cleared."""
        while self._timers and self._timers[0][0] <= now:
            when, _, conn = heapq.heappop(self._timers)
            if conn.deadline == when and conn in self._conns:
                conn.deadline = None
                yield conn
