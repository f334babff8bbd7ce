"""Reading one HTTP/1.1 request under limits: a deadline for the whole request, a bounded body.

Bodies are framed by `Content-Length` or by `Transfer-Encoding: chunked` (RFC 9112 section 6 and
7.1); anything else is refused. A request whose framing cannot be trusted (both headers, two
different lengths, a bad chunk) is answered and its connection closed, because the bytes that
follow cannot be told apart from the next request (request smuggling).
"""
from __future__ import annotations

import io
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from email.message import Message
from http import HTTPStatus
from typing import Final

_MAX_CHUNK_LINE: Final = 1024  # "<hex size>[;extensions]\r\n"
_MAX_TRAILER_LINES: Final = 32
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")
_DIGITS: Final = re.compile(r"[0-9]{1,18}")  # 18 digits: anything longer is over every limit anyway


@dataclass(frozen=True)
class HttpLimits:
    """What one server accepts; each endpoint sets its own body limit.

    max_body_bytes: a larger body gets 413 before it is read (the connection then closes).
    max_connections: connections served at once, one thread each. Further connections wait in
        the listen backlog (not refused); while all are taken, the longest-idle keep-alive
        connection is closed to make room. Default 256: four times the 64-client burst tests.
    backlog: the listen queue (`request_queue_size`); the kernel caps it at
        net.core.somaxconn (4096 on current kernels). Default 1024.
    request_timeout_s: a request line, its headers and its body must all arrive within this
        from the request's first byte, and a reply must be taken by the client within it: a
        client trickling one byte at a time (slowloris) is cut off. Default 10 s (kube-scheduler's
        httpTimeout and the webhook's timeoutSeconds are both shorter).
    idle_timeout_s: how long a keep-alive connection may wait for its next request. Default
        120 s: longer than Go's `http.Transport.IdleConnTimeout` (90 s, which kube-scheduler's
        extender client and the API server's webhook client use), so the client closes idle
        connections first and never sends a POST on a connection the server is closing (Go does
        not retry a POST that hit a closed keep-alive connection).
    """

    max_body_bytes: int = 8 * 1024 * 1024
    max_connections: int = 256
    backlog: int = 1024
    request_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0

    @classmethod
    def of(cls, settings: object) -> HttpLimits:
        """The limits a server's settings carry: its attributes named as these fields (the
        extender's and the webhook's ServerSettings each choose their own defaults)."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_connections", "backlog"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("request_timeout_s", "idle_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


class HttpError(Exception):
    """A client error: answered with `status` and the JSON error body (`jsonbody.error_body`).

    path: where in the request body the problem is (a JSON path such as `Pod.metadata.name`),
        None when it is not about one field.
    close: end the connection after the reply (the rest of the request cannot be skipped).
    """

    def __init__(
        self,
        status: HTTPStatus,
        message: str,
        *,
        path: str | None = None,
        close: bool = False,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.path = path
        self.close = close
        self.headers = tuple(headers)


@dataclass(frozen=True)
class Request:
    """One request as an endpoint sees it: the body is read and within the limit."""

    method: str
    path: str
    """The URL path without the query string."""
    query: str
    headers: Message
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


class RequestTimeout(TimeoutError):
    """The request did not arrive completely within `request_timeout_s`."""


class DeadlineReader(io.RawIOBase):
    """The connection's socket as a raw stream whose reads share one deadline per request.

    Waiting for a request on a kept-alive connection may take `idle_timeout_s`; once its first
    byte has arrived, the whole request must arrive within `request_timeout_s`. A per-read
    timeout alone would let a client send one byte per interval forever.
    """

    def __init__(self, sock: socket.socket, limits: HttpLimits) -> None:
        super().__init__()
        self._sock = sock
        self._limits = limits
        self.deadline: float | None = time.monotonic() + limits.request_timeout_s  # a new connection must speak
        self.started = False

    def readable(self) -> bool:
        return True

    def next_request(self) -> None:
        """Between requests: the next read may wait the idle timeout."""
        self.deadline = None
        self.started = False

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self.deadline is None:
            timeout = self._limits.idle_timeout_s
        else:
            timeout = self.deadline - time.monotonic()
            if timeout <= 0:
                raise RequestTimeout(f"request not complete within {self._limits.request_timeout_s:g} s")
        self._sock.settimeout(timeout)
        try:
            n = self._sock.recv_into(buffer)
        except TimeoutError:
            if self.deadline is None:
                raise
            raise RequestTimeout(f"request not complete within {self._limits.request_timeout_s:g} s") from None
        if n and not self.started:
            self.started = True
            if self.deadline is None:
                self.deadline = time.monotonic() + self._limits.request_timeout_s
        return n


def body_length(headers: Message, limits: HttpLimits) -> int | None:
    """The declared body length, None for a chunked body. Raises HttpError for framing that
    cannot be trusted (the connection must close) and for a body over the limit (413)."""
    encodings = headers.get_all("Transfer-Encoding") or []
    lengths = headers.get_all("Content-Length") or []
    if encodings:
        if lengths:
            raise HttpError(HTTPStatus.BAD_REQUEST, "both Transfer-Encoding and Content-Length are set; send one", close=True)
        codings = [c.strip().lower() for value in encodings for c in value.split(",") if c.strip()]
        if codings != ["chunked"]:
            raise HttpError(
                HTTPStatus.BAD_REQUEST,
                f"Transfer-Encoding {', '.join(codings) or '(empty)'} is not supported; send Content-Length or chunked",
                close=True,
            )
        return None
    if not lengths:
        return 0
    values = {v.strip() for v in lengths}
    if len(values) != 1:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"conflicting Content-Length headers {sorted(values)}", close=True)
    (value,) = values
    if not value.isascii() or not value.isdigit():
        raise HttpError(HTTPStatus.BAD_REQUEST, f"Content-Length {value[:40]!r} is not a number of bytes", close=True)
    if not _DIGITS.fullmatch(value) or int(value) > limits.max_body_bytes:
        raise HttpError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            f"request body of {value[:40]} bytes exceeds the limit of {limits.max_body_bytes} bytes",
            close=True,
        )
    return int(value)


def read_body(rfile: io.BufferedReader, length: int | None, limits: HttpLimits) -> bytes:
    """The body framed as `body_length` said; a short or malformed body raises HttpError."""
    if length is None:
        return _read_chunked(rfile, limits.max_body_bytes)
    data = rfile.read(length) if length else b""
    if len(data) < length:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"body ended after {len(data)} of {length} bytes", close=True)
    return data


def _bad_chunk(message: str) -> HttpError:
    return HttpError(HTTPStatus.BAD_REQUEST, f"malformed chunked body: {message}", close=True)


def _read_chunked(rfile: io.BufferedReader, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = rfile.readline(_MAX_CHUNK_LINE + 1)
        if not line.endswith(b"\n") or len(line) > _MAX_CHUNK_LINE:
            raise _bad_chunk("chunk size line missing, unterminated or too long")
        size_text = line.split(b";", 1)[0].strip()
        if not _HEX.fullmatch(size_text):
            raise _bad_chunk(f"chunk size {size_text[:20]!r} is not hexadecimal")
        size = int(size_text, 16)
        if size == 0:
            for _ in range(_MAX_TRAILER_LINES):
                trailer = rfile.readline(_MAX_CHUNK_LINE + 1)
                if trailer in (b"\r\n", b"\n"):
                    return b"".join(parts)
                if not trailer.endswith(b"\n") or len(trailer) > _MAX_CHUNK_LINE:
                    raise _bad_chunk("trailer missing, unterminated or too long")
            raise _bad_chunk(f"more than {_MAX_TRAILER_LINES} trailer lines")
        total += size
        if total > max_bytes:
            raise HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"chunked request body exceeds the limit of {max_bytes} bytes",
                close=True,
            )
        data = rfile.read(size)
        if len(data) < size or rfile.read(2) != b"\r\n":
            raise _bad_chunk("chunk shorter than its size or not followed by CRLF")
        parts.append(data)
