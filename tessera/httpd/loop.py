"""The event loop that holds every connection of a `HardenedHTTPServer` (see `server.py` for why).

One thread runs a selector over the listening socket and every connection not being answered
by a worker. Each connection is in one of the phases of `connection.Phase`, and in every phase
but WORKING it has a deadline (`HttpLimits` documents each) and a place in the order in which
connections are closed to make room (`occupancy.py`).

New connections are accepted as they come, up to `max_connections + backlog`, so a well-behaved
client is never stuck in the kernel's queue behind a flood. Over `max_connections`, the loop
closes connections to make room: a lingering one first, else whichever has waited longest for
its client among those past their grace (0.1 s for a request, so a new client always has time
to send one). A well-behaved client sends its request within milliseconds of connecting, so it
is never the oldest; a connection with a request in progress is never closed to make room.
"""
from __future__ import annotations

import abc
import enum
import errno
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from tessera.httpd.connection import Connection, IoState, Phase
from tessera.httpd.framing import HttpDate, HttpError, HttpLimits
from tessera.httpd.head import Head, NoRequest
from tessera.httpd.mailbox import Mailbox
from tessera.httpd.occupancy import Occupancy, Place
from tessera.httpd.workers import Job, WorkerPool

log = logging.getLogger(__name__)

LINGER_S: Final = 1.0
"""How long a closing connection keeps discarding the client's unread bytes (RFC 9112 section
9.6): closing with them unread makes the kernel send a reset that can destroy the reply."""
_ACCEPT_BATCH: Final = 64  # connections accepted per turn: the others' reads go on between batches
_MAX_WAIT_S: Final = 1.0  # the longest select() without a deadline due
_PIPELINED_PER_TURN: Final = 64  # requests taken from behind answered ones per turn (see _take_pipelined)
_ACCEPT_RETRY_S: Final = 0.1  # after running out of file descriptors
_OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_READ: Final = selectors.EVENT_READ
_WRITE: Final = selectors.EVENT_WRITE


class _Source(enum.Enum):
    LISTENER = "listener"
    WAKE = "wake"


class ConnectionLoop(abc.ABC):
    """Accepts, reads, writes, times out and evicts connections on one thread; the HTTP meaning
    of the bytes is the subclass's (`on_head`, `on_request`, `refuse`)."""

    def __init__(self, address: tuple[str, int], limits: HttpLimits, *, tls: ssl.SSLContext | None, name: str) -> None:
        self.limits = limits
        self.name = name
        self._tls = tls
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.create_server(address, family=family, backlog=limits.backlog)
        self._listener.setblocking(False)
        self.server_address: tuple[str, int] = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._mailbox = Mailbox()
        self._selector.register(self._mailbox.receiver, _READ, _Source.WAKE)
        self._conns = Occupancy(limits.request_grace_s)
        self._pipelined: deque[Connection] = deque()
        self._workers = WorkerPool(limits.max_connections, name)
        self._date = HttpDate()
        self._stopping = threading.Event()
        self._released = threading.Event()
        self._starting = threading.Lock()
        self._thread: threading.Thread | None = None
        self._accepting = True
        self._listening = False
        self._most_held = limits.max_connections + limits.backlog
        self._room_at: float | None = None  # when to make room or listen again
        self._paused_until = 0.0
        self._exit = False

    # --- the subclass's part -----------------------------------------------------------------------

    @abc.abstractmethod
    def on_head(self, conn: Connection, head: Head) -> bool:
        """A request head has arrived: set `conn.body` (and what answers it); False when the
        connection was closed. Raise HttpError to refuse it."""

    @abc.abstractmethod
    def on_request(self, conn: Connection, head: Head, body: bytes, received_at: float) -> None:
        """The request has arrived in full: `refuse` it or `hand_to_worker`."""

    @abc.abstractmethod
    def refuse(self, conn: Connection, exc: HttpError, *, observed: bool = True) -> None:
        """Answer `exc` from the loop (through `send_reply`)."""

    @abc.abstractmethod
    def on_deadline(self, conn: Connection) -> None:
        """`conn`'s deadline has passed: answer (through `send_reply`) or `close` it."""

    # --- lifecycle (any thread) ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def date(self) -> str:
        return self._date.now()

    def active_connections(self) -> int:
        """Connections held open: waiting, being answered, or closing."""
        return len(self._conns)

    def start(self) -> threading.Thread:
        """Serve on a daemon thread (tests, --simulate, the node agent); it ends once the server
        is stopped, or shut down with no connection left."""
        with self._starting:
            if self._thread is None:
                self._mailbox.open()
                self._thread = threading.Thread(target=self._run, name=f"{self.name}-loop", daemon=True)
                self._thread.start()
            return self._thread

    def serve_forever(self) -> None:
        """Serve until `shutdown()` or `stop()`."""
        self.start()
        self._released.wait()

    def shutdown(self) -> None:
        """Stop accepting and release `serve_forever`; open connections are still served (until
        `stop`, or until they end)."""
        self._mailbox.call(self._stop_accepting)
        self._released.set()

    def server_close(self) -> None:
        self._mailbox.call(self._close_listener)

    def stop(self, drain_s: float = 5.0) -> None:
        """Stop accepting, let requests in progress finish (up to `drain_s`), close the rest.
        Replies sent meanwhile say `Connection: close`; idle connections are closed at once."""
        self._stopping.set()
        self._mailbox.call(self._begin_stop)
        self._released.set()
        deadline = time.monotonic() + drain_s
        while self.active_connections() and time.monotonic() < deadline:
            time.sleep(0.01)
        self._mailbox.call(self._end)
        thread = self._thread
        if thread is None:  # never started: nothing else releases the selector
            self._mailbox.close(self._cleanup)
        elif thread is not threading.current_thread():
            thread.join(timeout=5.0)
        self._workers.stop()

    # --- workers ------------------------------------------------------------------------------------

    def hand_to_worker(self, conn: Connection, job: Job) -> None:
        """Loop thread: the worker owns `conn` until it calls `hand_back`. The socket stays in
        the selector (two system calls a request fewer) until it turns readable meanwhile
        (`_ready`): the loop then stops watching it, and never reads it while the worker has it."""
        conn.phase = Phase.WORKING
        self._conns.place(conn, None, 0.0)
        conn.deadline = None
        self._workers.submit(job)

    def hand_back(self, conn: Connection) -> None:
        """Worker thread: the reply is written, or handed to the loop to finish."""
        self._mailbox.hand_back(conn)

    # --- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._listen(True)
            while not (self._exit or (not self._accepting and not self._conns)):
                now = time.monotonic()
                events = self._selector.select(self._select_timeout(now))
                if any(key.data is _Source.WAKE for key, _mask in events):
                    self._mailbox.drain()
                for fn in self._mailbox.calls():
                    fn()
                self._take_done()  # before accepting: a connection answered meanwhile may free room
                self._take_pipelined()
                for key, _mask in events:
                    self._event(key)
                now = time.monotonic()
                self._expire(now)
                self._adjust_listening(now)
        except Exception:  # a bug of ours: clients get refused rather than hang
            log.exception("%s: the event loop failed; closing every connection", self.name)
            self._close_listener()
        finally:
            self._mailbox.close(self._cleanup)
            self._released.set()

    def _event(self, key: selectors.SelectorKey) -> None:
        source = key.data
        if source is _Source.WAKE:
            return
        if source is _Source.LISTENER:
            self._accept()
            return
        conn: Connection = source
        if conn in self._conns:  # else closed earlier in this turn (to make room)
            self._guarded(conn, self._ready)

    def _ready(self, conn: Connection) -> None:
        if conn.phase is Phase.HANDSHAKE:
            self._handshake(conn)
        elif conn.phase is Phase.READING:
            self._read(conn)
        elif conn.phase is Phase.WRITING:
            self._write(conn)
        elif conn.phase is Phase.CLOSING and not conn.discard():
            self.close(conn)
        elif conn.phase is Phase.WORKING:  # pipelined bytes or EOF: read once the reply is out
            self._watch(conn, 0)

    def _guarded(self, conn: Connection, step: Callable[[Connection], None]) -> None:
        """Run one step for `conn`; a bug of ours (an endpoint lookup or an observer that
        raises) closes that connection, never the loop."""
        try:
            step(conn)
        except Exception:
            log.exception("%s: connection from %s failed", self.name, conn.peer)
            self.close(conn)

    def _select_timeout(self, now: float) -> float:
        timeout = 0.0 if self._pipelined else _MAX_WAIT_S
        deadline = self._conns.next_deadline()
        if deadline is not None:
            timeout = min(timeout, deadline - now)
        if self._room_at is not None:
            timeout = min(timeout, self._room_at - now)
        return max(0.0, timeout)

    def _take_pipelined(self) -> None:
        """Requests that arrived behind the one just answered, a bounded number per turn so one
        client's pipeline cannot hold up the others (a turn with some left does not wait)."""
        for _ in range(min(len(self._pipelined), _PIPELINED_PER_TURN)):
            conn = self._pipelined.popleft()
            if conn in self._conns and conn.phase is Phase.READING:
                self._guarded(conn, lambda c: self._advance(c, time.monotonic()))

    def _take_done(self) -> None:
        for conn in self._mailbox.handed_back():
            if conn not in self._conns:
                conn.close()  # cut by stop() while its worker ran
                continue
            self._guarded(conn, self._after_worker)

    # --- accepting and making room ------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            now = time.monotonic()
            if self._conns.held() >= self._most_held:
                break  # the rest wait in the kernel's backlog; _adjust_listening re-arms
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    log.warning("%s: cannot accept connections for now: %s", self.name, exc)
                    self._paused_until = now + _ACCEPT_RETRY_S
                    break
                continue  # that client gave up before we got to it
            self._open(sock, address, now)
        self._make_room(time.monotonic())

    def _make_room(self, now: float) -> None:
        """Over the cap, close the connections that have waited longest past their grace until
        back at it. A connection whose worker has sent its last reply and will hand it back for
        closing no longer counts: its client may be connecting again already."""
        while self._conns.held() > self.limits.max_connections:
            victim = self._conns.evictee(now)
            if victim is None:
                return
            log.debug("%s: closing a connection from %s (%s, waiting %.2f s) to make room", self.name, victim.peer, victim.phase.value, now - victim.waiting_since)
            self.close(victim)

    def _adjust_listening(self, now: float) -> None:
        self._make_room(now)
        self._room_at = None
        if self._conns.held() > self.limits.max_connections:  # again once the next grace is over
            self._room_at = self._conns.next_evictable_at()
        if not self._accepting:
            return
        if now < self._paused_until:
            self._listen(False)
            self._room_at = min(self._paused_until, self._room_at or self._paused_until)
            return
        self._listen(self._conns.held() < self._most_held)

    def _listen(self, on: bool) -> None:
        if on == self._listening or self._listener.fileno() < 0:
            return
        if on:
            self._selector.register(self._listener, _READ, _Source.LISTENER)
        else:
            self._selector.unregister(self._listener)
        self._listening = on

    def _open(self, sock: socket.socket, address: object, now: float) -> None:
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)  # replies are one write each
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError) as exc:
            log.debug("%s: could not set up a connection: %s", self.name, exc)
            sock.close()
            return
        peer = str(address[0]) if isinstance(address, tuple) and address else "?"
        conn = Connection(sock, peer, now)
        self._conns.add(conn, now, now + self.limits.request_timeout_s)  # a new connection must speak
        self._guarded(conn, self._ready)  # a client's request often arrives with its connection

    # --- reading ------------------------------------------------------------------------------------

    def _handshake(self, conn: Connection) -> None:
        try:
            state = conn.handshake()
        except OSError as exc:  # ssl.SSLError included: not TLS, a rejected certificate, a reset
            self._failed(conn, exc)
            return
        if state is IoState.DONE:
            conn.phase = Phase.READING
            self._conns.set_deadline(conn, time.monotonic() + self.limits.request_timeout_s)
            self._read(conn)
        else:
            self._watch(conn, _READ if state is IoState.WANT_READ else _WRITE)

    def _read(self, conn: Connection) -> None:
        try:
            state = conn.receive()
        except OSError as exc:
            self._failed(conn, exc)
            return
        if state is not IoState.DONE:
            self._watch(conn, _READ if state is IoState.WANT_READ else _WRITE)
            return
        now = time.monotonic()
        if conn.buffer and not conn.started:
            self._request_begins(conn, now)
        self._advance(conn, now)

    def _request_begins(self, conn: Connection, now: float) -> None:
        conn.first_byte_at = now
        if not conn.fresh:  # a new connection's first request keeps the deadline it started with
            self._conns.place(conn, Place.REQUEST, now)
            self._conns.set_deadline(conn, now + self.limits.request_timeout_s)

    def _advance(self, conn: Connection, now: float) -> None:
        """Parse what has arrived; hand on a complete request, or wait for more."""
        try:
            if conn.head is None:
                conn.head = conn.head_reader.take(conn.buffer, conn.eof)
                if conn.head is None:
                    self._watch(conn, _READ)
                    return
                if not self.on_head(conn, conn.head):
                    return
            assert conn.body is not None
            body = conn.body.take(conn.buffer, conn.eof)
        except NoRequest:
            self.close(conn)
            return
        except HttpError as exc:
            self.refuse(conn, exc)
            return
        if body is None:
            self._watch(conn, _READ)
            return
        self.on_request(conn, conn.head, body, conn.first_byte_at or now)

    # --- writing ------------------------------------------------------------------------------------

    def send_reply(self, conn: Connection, data: bytes, close: bool) -> None:
        """Loop thread: send `data` as the answer to the current request."""
        now = time.monotonic()
        conn.out, conn.out_pos, conn.close_after = data, 0, close
        conn.phase = Phase.WRITING
        self._conns.place(conn, Place.REPLY, now)
        self._conns.set_deadline(conn, now + self.limits.request_timeout_s)
        self._write(conn)

    def _after_worker(self, conn: Connection) -> None:
        now = time.monotonic()
        if conn.broken:
            self.close(conn)
        elif conn.io is IoState.DONE:
            self._reply_sent(conn, now)
        else:  # the client did not take the whole reply at once: the loop waits for it
            conn.phase = Phase.WRITING
            self._conns.place(conn, Place.REPLY, now)
            self._conns.set_deadline(conn, now + self.limits.request_timeout_s)
            self._watch(conn, _READ if conn.io is IoState.WANT_READ else _WRITE)

    def _write(self, conn: Connection) -> None:
        sent_before = conn.out_pos
        try:
            state = conn.send_pending()
        except OSError as exc:
            self._failed(conn, exc)
            return
        now = time.monotonic()
        if state is IoState.DONE:
            self._reply_sent(conn, now)
            return
        if conn.out_pos != sent_before:  # the client is taking it: its wait starts again
            self._conns.place(conn, Place.REPLY, now)
        self._watch(conn, _READ if state is IoState.WANT_READ else _WRITE)

    def _reply_sent(self, conn: Connection, now: float) -> None:
        conn.served += 1
        conn.fresh = False
        conn.next_request()
        if conn.close_after or self.stopping:
            self._begin_closing(conn, now)
            return
        conn.phase = Phase.READING
        if conn.buffer:  # the next request arrived with this one (pipelining): on the next turn,
            self._request_begins(conn, now)  # not from here, where a reply from the loop (a 404)
            self._pipelined.append(conn)  # would recurse once per request in the buffer
        elif conn.eof:
            self.close(conn)
        else:
            self._conns.place(conn, Place.IDLE, now)
            self._conns.set_deadline(conn, now + self.limits.idle_timeout_s)
            self._watch(conn, _READ)

    def _begin_closing(self, conn: Connection, now: float) -> None:
        if conn.eof or not conn.half_close():
            self.close(conn)
            return
        conn.phase = Phase.CLOSING
        self._conns.place(conn, Place.CLOSING, now)
        self._conns.set_deadline(conn, now + LINGER_S)
        self._watch(conn, _READ)

    # --- bookkeeping ----------------------------------------------------------------------------------

    def close(self, conn: Connection) -> None:
        """Loop thread: close `conn` now, whatever it is doing."""
        if conn not in self._conns:
            return
        self._conns.remove(conn)
        self._watch(conn, 0)
        if conn.phase is Phase.WORKING:
            conn.cut()  # its worker closes it when it hands it back
        else:
            conn.close()

    def _failed(self, conn: Connection, exc: OSError) -> None:
        # A client that vanishes (reset, EOF in the TLS handshake) is routine: debug. Anything
        # else, such as a client rejecting our certificate, is one warning line.
        routine = isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLEOFError))
        log.log(logging.DEBUG if routine else logging.WARNING, "%s: connection from %s failed: %s", self.name, conn.peer, exc)
        self.close(conn)

    def _watch(self, conn: Connection, events: int) -> None:
        if events == conn.watching:
            return
        if conn.watching == 0:
            self._selector.register(conn.sock, events, conn)
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.watching = events

    def _expire(self, now: float) -> None:
        for conn in self._conns.due(now):
            self._guarded(conn, self.on_deadline)

    # --- stopping (loop thread) ---------------------------------------------------------------------

    def _stop_accepting(self) -> None:
        self._accepting = False
        self._listen(False)

    def _close_listener(self) -> None:
        self._stop_accepting()
        self._listener.close()

    def _begin_stop(self) -> None:
        self._close_listener()
        for conn in self._conns.all():
            if conn.phase is Phase.HANDSHAKE or (conn.phase is Phase.READING and not conn.started):
                self.close(conn)

    def _end(self) -> None:
        self._exit = True  # _cleanup closes what is left

    def _cleanup(self) -> None:
        for conn in self._conns.all():
            self.close(conn)
        self._listening = False
        self._selector.close()
