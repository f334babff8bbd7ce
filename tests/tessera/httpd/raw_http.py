"""A client that speaks HTTP/1.1 byte for byte over a real socket (plain or TLS), for requests no
well-behaved library would send, slow and idle clients (`Hostile`), and a burst driver. Shared by the httpd, extender, webhook and
node agent tests (their conftest puts this directory on sys.path)."""
from __future__ import annotations

import enum
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def closes(self) -> bool:
        return self.headers.get("connection", "").lower() == "close"


@dataclass
class RawConnection:
    """One connection; `send` bytes, `read_response` parses one reply (Content-Length framed)."""

    sock: socket.socket
    buffer: bytes = b""

    @staticmethod
    def open(port: int, *, tls: ssl.SSLContext | None = None, timeout_s: float = 10.0) -> RawConnection:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="localhost")
        return RawConnection(sock)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def half_close(self) -> None:
        """No more bytes from us (the server sees EOF); replies can still be read."""
        if isinstance(self.sock, ssl.SSLSocket):
            return  # a TLS half-close would end the session; the server's timeouts cover it
        self.sock.shutdown(socket.SHUT_WR)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buffer += data
        return True

    def read_response(self, *, head: bool = False) -> RawResponse | None:
        """The next reply, None if the server closed the connection without one. `head`: the
        reply to a HEAD request (its Content-Length describes a body that is not sent)."""
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                if self.buffer:
                    raise AssertionError(f"connection closed inside a reply head: {self.buffer[:200]!r}")
                return None
        reply_head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = reply_head.decode("latin-1").split("\r\n")
        version, code, *_ = lines[0].split(" ", 2)
        assert version == "HTTP/1.1", lines[0]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(code)
        if status == 100:
            return RawResponse(100, headers, b"")
        length = 0 if head else int(headers["content-length"])  # every reply of ours is length-framed
        while len(self.buffer) < length:
            if not self._fill():
                raise AssertionError("connection closed inside a reply body")
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return RawResponse(status, headers, body)

    def is_closed_by_peer(self, wait_s: float = 5.0) -> bool:
        """True once the server has closed the connection (EOF or reset) within `wait_s`."""
        self.sock.settimeout(wait_s)
        try:
            return not self.sock.recv(1)
        except (ConnectionResetError, ssl.SSLError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def exchange(
    port: int, data: bytes, *, tls: ssl.SSLContext | None = None, half_close: bool = True, head: bool = False
) -> list[RawResponse]:
    """Send `data` on a fresh connection and read the replies (100 Continue included): all of
    them until the server closes, when we half-close (plain TCP); else up to the first final one."""
    conn = RawConnection.open(port, tls=tls, timeout_s=10.0)
    until_close = half_close and tls is None
    replies: list[RawResponse] = []
    try:
        conn.send(data)
        if until_close:
            conn.half_close()
        while True:
            first = not any(r.status != 100 for r in replies)
            reply = conn.read_response(head=head and first)  # bytes after a HEAD are a next request
            if reply is None:
                break
            replies.append(reply)
            if reply.status != 100 and not until_close:
                break
    except TimeoutError:
        pass
    finally:
        conn.close()
    return replies


def request_line(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body and not any(k.lower() in ("content-length", "transfer-encoding") for k in headers or {}):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class BurstResult:
    statuses: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def burst(
    connect: Callable[[], http.client.HTTPConnection],
    send: Callable[[http.client.HTTPConnection, int, int], int],
    *,
    clients: int,
    requests_per_client: int,
    keep_alive: bool,
) -> BurstResult:
    """`clients` threads start together; each sends `requests_per_client` requests through
    `send(conn, client, i) -> status`, on one kept-alive connection or a new one per request.
    Every connection error (refused, reset, timeout) is recorded, never retried."""
    result = BurstResult()
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(index: int) -> None:
        statuses: list[int] = []
        errors: list[str] = []
        conn: http.client.HTTPConnection | None = None
        try:
            start.wait(30)
            for i in range(requests_per_client):
                if conn is None or not keep_alive:
                    if conn is not None:
                        conn.close()
                    conn = connect()
                statuses.append(send(conn, index, i))
        except Exception as exc:  # surfaced through result.errors
            errors.append(f"client {index}: {type(exc).__name__}: {exc}")
        finally:
            if conn is not None:
                conn.close()
        with lock:
            result.statuses += statuses
            result.errors += errors

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return result


class Hostile(enum.Enum):
    """A slow or idle client, as many of them hold connections open (slowloris and kin)."""

    SILENT = "silent"  # connects and never says a word
    HEAD = "head"  # sends part of a request head and stalls
    BODY = "body"  # sends a whole head and part of its body, and stalls
    NO_READ = "no-read"  # sends a request for a large reply and never reads it
    TLS_HELLO = "tls-hello"  # sends the first bytes of a TLS ClientHello and stalls

    def open(self, port: int, *, path: str = "/", tls: ssl.SSLContext | None = None) -> socket.socket:
        """A connection that behaves so; its first bytes are sent. Over TLS (`tls`), every kind
        but SILENT and TLS_HELLO first finishes the handshake."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self is Hostile.NO_READ:  # a small window: the server's reply stalls in its send buffer
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        if tls is not None and self not in (Hostile.SILENT, Hostile.TLS_HELLO):
            sock = tls.wrap_socket(sock, server_hostname="localhost")
        if self is Hostile.HEAD:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-".encode())
        elif self is Hostile.BODY:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{{\"a".encode())
        elif self is Hostile.NO_READ:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        elif self is Hostile.TLS_HELLO:
            sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        return sock


def closed_by_peer(sock: socket.socket, wait_s: float = 5.0) -> bool:
    """True once the server has closed `sock` (EOF or reset) within `wait_s`; bytes it sent
    before closing (a reply, a 408) are read past."""
    sock.settimeout(wait_s)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return True
