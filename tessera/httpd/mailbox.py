"""How other threads reach the event loop: workers hand connections back, and `stop()` and
`shutdown()` ask for calls to run on the loop's thread. Each posting wakes the loop's selector
through a socket pair; once the loop has ended, a call runs on the caller's thread and a
handed-back connection is closed there."""
from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable, Iterator

from tessera.httpd.connection import Connection


class Mailbox:
    def __init__(self) -> None:
        self._receiver, self._sender = socket.socketpair()
        self._receiver.setblocking(False)
        self._sender.setblocking(False)
        self._wake_pending = False
        self._lock = threading.Lock()
        self._open = False
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Connection] = queue.SimpleQueue()

    @property
    def receiver(self) -> socket.socket:
        """What the loop's selector watches."""
        return self._receiver

    def open(self) -> None:
        with self._lock:
            self._open = True

    def call(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the loop's thread, or here when the loop is not running."""
        with self._lock:
            if not self._open:
                fn()
                return
            self._calls.put(fn)
        self._wake()

    def hand_back(self, conn: Connection) -> None:
        with self._lock:
            if not self._open:  # the loop has ended while the worker ran: nobody else will close it
                conn.close()
                return
            self._done.put(conn)
        self._wake()

    def _wake(self) -> None:
        # The flag saves a syscall per reply while a wake-up is pending (see `drain`).
        if not self._wake_pending:
            self._wake_pending = True
            try:
                self._sender.send(b"\0")
            except OSError:
                pass  # the pair is full (a wake-up is pending anyway) or closed

    def drain(self) -> None:
        """Loop thread, before it takes `calls` and `handed_back`: empty the socket, then clear
        the flag. A posting that saw the flag set is in its queue by then; one after the clearing
        sends a byte of its own."""
        try:
            self._receiver.recv(4096)  # more than that pending (it never is) wakes the loop again
        except BlockingIOError:
            pass
        self._wake_pending = False

    def calls(self) -> Iterator[Callable[[], None]]:
        while True:
            try:
                yield self._calls.get_nowait()
            except queue.Empty:
                return

    def handed_back(self) -> Iterator[Connection]:
        while True:
            try:
                yield self._done.get_nowait()
            except queue.Empty:
                return

    def close(self, last: Callable[[], None]) -> None:
        """The loop ends: run the calls still queued, then `last`; later postings run or close
        on their own threads."""
        with self._lock:
            self._open = False
            for fn in self.calls():
                fn()
            last()
            for conn in self.handed_back():
                conn.close()
            self._receiver.close()
            self._sender.close()
