"""One client connection as the event loop holds it: a non-blocking socket (plain or TLS), the
bytes received and not yet parsed, the reply not yet sent, and the phase it is in.

A connection belongs to the event loop's thread in every phase but WORKING, when one worker
thread owns it (runs the endpoint and writes the reply) and the loop does not touch it; the
hand-over in each direction goes through the server's queues, so no lock is needed.
"""
from __future__ import annotations

import enum
import socket
import ssl
from typing import Final

from tessera.httpd.framing import BodyReader, Endpoint, HttpError
from tessera.httpd.head import Head, HeadReader

RECV_BYTES: Final = 65536
_SEND_BYTES: Final = 256 * 1024  # the slice offered per send; TLS retries must offer the same one


class Phase(enum.Enum):
    HANDSHAKE = "handshake"  # TLS handshake in progress
    READING = "reading"  # waiting for a request, or receiving one
    WORKING = "working"  # a worker thread answers the request; the loop keeps off
    WRITING = "writing"  # a reply waits for the client to take it
    CLOSING = "closing"  # answered and half-closed; the client's unread bytes are discarded


class IoState(enum.Enum):
    """What a non-blocking socket operation left to wait for."""

    DONE = "done"
    WANT_READ = "want-read"
    WANT_WRITE = "want-write"
    CLOSED = "closed"


class Connection:
    """Bookkeeping for one connection; see the module docstring for who may touch it when."""

    def __init__(self, sock: socket.socket, peer: str, now: float) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.phase = Phase.HANDSHAKE if isinstance(sock, ssl.SSLSocket) else Phase.READING
        self.buffer = bytearray()
        self.eof = False
        self.head_reader = HeadReader()
        self.head: Head | None = None
        self.body: BodyReader | None = None
        self.endpoint: Endpoint | None = None
        self.refusal: HttpError | None = None
        """An answer decided from the head (404, 405) that waits for the body to be read."""
        self.first_byte_at: float | None = None
        """When the current request's first byte arrived (monotonic); None before it."""
        self.served = 0
        self.fresh = True
        """No request has begun since the connection (or its TLS session) started: its
        deadline runs from then, as a new connection must speak within the request timeout."""
        self.deadline: float | None = now
        self.waiting_since = now
        self.out = b""
        self.out_pos = 0
        self.close_after = False
        self.io = IoState.DONE
        """What the worker's attempt to send the reply left to wait for."""
        self.broken = False
        """The worker's send failed: the client is gone."""
        self.finished = False
        """Set by the worker: the connection is to be closed once handed back (last reply sent,
        or the client gone)."""
        self.watching = 0
        """The selector events registered for this socket (0: not registered)."""

    # --- requests --------------------------------------------------------------------------------

    def next_request(self) -> None:
        self.head = None
        self.body = None
        self.endpoint = None
        self.refusal = None
        self.first_byte_at = None

    @property
    def started(self) -> bool:
        """Some byte of the current request has arrived."""
        return self.first_byte_at is not None

    # --- socket I/O (non-blocking) ----------------------------------------------------------------

    def handshake(self) -> IoState:
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            return IoState.WANT_READ
        except ssl.SSLWantWriteError:
            return IoState.WANT_WRITE
        return IoState.DONE

    def receive(self) -> IoState:
        """Append what has arrived to `buffer` (DONE), note EOF (`eof`, DONE), or say what to
        wait for. TLS records already decrypted inside the SSL object are taken too: the
        selector cannot see them."""
        try:
            data = self.sock.recv(RECV_BYTES)
            if data and isinstance(self.sock, ssl.SSLSocket):
                while self.sock.pending():  # the rest of a record already read: at most 16 KiB
                    data += self.sock.recv(RECV_BYTES)
        except (BlockingIOError, ssl.SSLWantReadError):
            return IoState.WANT_READ
        except ssl.SSLWantWriteError:
            return IoState.WANT_WRITE
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            data = b""
        if data:
            self.buffer += data
        else:
            self.eof = True
        return IoState.DONE

    def send_pending(self) -> IoState:
        """Send what is left of `out`: DONE once all of it is with the kernel. The slice offered
        starts where the last accepted one ended and has a fixed size, so a TLS write that must
        be retried is retried with the same bytes, as OpenSSL requires."""
        view = memoryview(self.out)
        while self.out_pos < len(view):
            try:
                self.out_pos += self.sock.send(view[self.out_pos : self.out_pos + _SEND_BYTES])
            except (BlockingIOError, ssl.SSLWantWriteError):
                return IoState.WANT_WRITE
            except ssl.SSLWantReadError:
                return IoState.WANT_READ
        self.out, self.out_pos = b"", 0
        return IoState.DONE

    def send_now(self, data: bytes) -> bool:
        """One non-blocking send of a few bytes (100 Continue); False when the socket did not
        take all of them."""
        try:
            return self.sock.send(data) == len(data)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except OSError:
            return False

    def send_from_worker(self) -> None:
        """The worker's attempt at sending `out`: most replies leave in this one call."""
        try:
            self.io = self.send_pending()
        except OSError:
            self.broken = True
        self.finished = self.broken or (self.io is IoState.DONE and self.close_after)

    def half_close(self) -> bool:
        """Stop writing (FIN after the reply); True unless the client has closed its side too.
        Nothing unread yet is no reason to close at once: a body the server refused unread may
        still be on its way, and closing before it lands makes the kernel reset the reply in
        flight. The plain socket's calls, also under TLS: no close_notify, bytes discarded raw."""
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_WR)
            return bool(socket.socket.recv(self.sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:  # nothing unread now; the client may still be sending
            return True
        except OSError:  # the connection is gone
            return False

    def discard(self) -> bool:
        """Read and drop what the client sends while closing; False once it has closed."""
        try:
            return bool(socket.socket.recv(self.sock, RECV_BYTES))
        except BlockingIOError:
            return True
        except OSError:
            return False

    def cut(self) -> None:
        """End the connection without closing the socket, for one a worker still holds: its
        send fails instead of reaching another socket given the same descriptor number."""
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass  # already gone

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass  # already gone
