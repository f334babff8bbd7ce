"""Limits, the request and reply types, and the framing of request bodies and replies.

Bodies are framed by `Content-Length` or by `Transfer-Encoding: chunked` (RFC 9112 section 6 and
7.1); anything else is refused. A request whose framing cannot be trusted (both headers, two
different lengths, a bad chunk) is answered and its connection closed, because the bytes that
follow cannot be told apart from the next request (request smuggling).

The body readers are incremental: the event loop hands them a connection's buffer each time bytes
arrive, and they take a body out of it once it is complete, so a slow client costs a buffer and
never a thread.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from email.message import Message
from email.utils import formatdate
from http import HTTPStatus
from typing import Final, Protocol

_MAX_CHUNK_LINE: Final = 1024  # "<hex size>[;extensions]\r\n", and each trailer line
_MAX_TRAILER_LINES: Final = 32
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")
_DIGITS: Final = re.compile(r"[0-9]{1,18}")  # 18 digits: anything longer is over every limit anyway


@dataclass(frozen=True)
class HttpLimits:
    """What one server accepts; each endpoint sets its own body limit.

    max_body_bytes: a larger body gets 413 before it is read (the connection then closes).
    max_connections: connections kept open once each has had its grace (`request_grace_s` for a
        request to arrive, 0.25 s idle, 0.5 s for a reply to be taken: `occupancy.Place`). Beyond it, the
        connection that has waited longest for its client is closed to make room (silent, still
        sending a request, idle between requests, or not taking its reply); one whose request is
        being answered never is. Also the most requests answered at once, one worker thread
        each; holding a connection costs a socket and its buffer. Default 256: four times the
        64-client burst tests.
    backlog: the listen queue; the kernel caps it at net.core.somaxconn (4096 on current
        kernels). Also how many connections beyond `max_connections` are taken in while they
        have their grace, so a new client is not held in the kernel's queue behind slow ones;
        past both, new connections wait in that queue (they are not refused). Default 1024.
    request_timeout_s: a request line, its headers and its body must all arrive within this
        from the request's first byte, and a reply must be taken by the client within it: a
        client trickling one byte at a time (slowloris) is cut off. A new connection must finish
        its TLS handshake within it, then send its first request in full within it. Default
        10 s (kube-scheduler's httpTimeout and the webhook's timeoutSeconds are both shorter).
    request_grace_s: how long a new connection may take to send its request (or finish its TLS
        handshake) before it may be closed to make room; 0.1 s by default, ample for a client
        that writes its request right after connecting. Longer trades room for clients that
        may be starved of CPU between connecting and writing (the tests' bursts of a hundred
        client threads in the server's own process).
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
    request_grace_s: float = 0.1

    @classmethod
    def of(cls, settings: object) -> HttpLimits:
        """The limits a server's settings carry: its attributes named as these fields (the
        extender's and the webhook's ServerSettings each choose their own defaults; a field
        they do not name keeps the default here)."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls) if hasattr(settings, f.name)})

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_connections", "backlog"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("request_timeout_s", "idle_timeout_s", "request_grace_s"):
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
    received_at: float
    """`time.monotonic()` when the request's first byte arrived: a time budget that must cover
    reading and decoding the body starts here."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


Endpoint = Callable[[Request], Response]


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
                f"Transfer-Encoding {', '.join(codings)[:200] or '(empty)'} is not supported; send Content-Length or chunked",
                close=True,
            )
        return None
    if not lengths:
        return 0
    values = {v.strip() for v in lengths}
    if len(values) != 1:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"conflicting Content-Length headers {sorted(values)}"[:300], close=True)
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


class BodyReader(Protocol):
    def take(self, buffer: bytearray, eof: bool) -> bytes | None:
        """The whole body, removed from the front of `buffer`, once it is there; None while
        more must arrive. `eof`: the client sends nothing more. Raises HttpError (close=True)
        for a malformed or short body."""
        ...


def body_reader(length: int | None, limits: HttpLimits) -> BodyReader:
    """The reader for a body framed as `body_length` said."""
    return ChunkedBody(limits.max_body_bytes) if length is None else LengthBody(length)


class LengthBody:
    def __init__(self, length: int) -> None:
        self.length = length

    def take(self, buffer: bytearray, eof: bool) -> bytes | None:
        if len(buffer) >= self.length:
            data = bytes(buffer[: self.length])
            del buffer[: self.length]
            return data
        if eof:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"body ended after {len(buffer)} of {self.length} bytes", close=True)
        return None


def _bad_chunk(message: str) -> HttpError:
    return HttpError(HTTPStatus.BAD_REQUEST, f"malformed chunked body: {message}", close=True)


class ChunkedBody:
    """RFC 9112 section 7.1, taken chunk by chunk as it arrives; trailers are read and dropped."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._parts: list[bytes] = []
        self._total = 0
        self._size: int | None = None  # the chunk being read; None: its size line comes next
        self._trailers: int | None = None  # trailer lines read; None: not at the trailer yet
        self._done = False

    def take(self, buffer: bytearray, eof: bool) -> bytes | None:
        """Each step takes one line or one chunk, False when it must wait for more bytes."""
        while not self._done:
            if self._trailers is not None:
                progressed = self._take_trailer(buffer, eof)
            elif self._size is None:
                progressed = self._take_size(buffer, eof)
            else:
                progressed = self._take_data(buffer, eof)
            if not progressed:
                return None
        return b"".join(self._parts)

    @staticmethod
    def _line(buffer: bytearray, eof: bool, what: str) -> bytes | None:
        end = buffer.find(b"\n", 0, _MAX_CHUNK_LINE)
        if end < 0:
            if eof or len(buffer) >= _MAX_CHUNK_LINE:
                raise _bad_chunk(f"{what} missing, unterminated or too long")
            return None
        line = bytes(buffer[: end + 1])
        del buffer[: end + 1]
        return line

    def _take_size(self, buffer: bytearray, eof: bool) -> bool:
        line = self._line(buffer, eof, "chunk size line")
        if line is None:
            return False
        size_text = line.split(b";", 1)[0].strip()
        if not _HEX.fullmatch(size_text):
            raise _bad_chunk(f"chunk size {size_text[:20]!r} is not hexadecimal")
        size = int(size_text, 16)
        if size == 0:
            self._trailers = 0
            return True
        self._total += size
        if self._total > self._max_bytes:
            raise HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"chunked request body exceeds the limit of {self._max_bytes} bytes",
                close=True,
            )
        self._size = size
        return True

    def _take_data(self, buffer: bytearray, eof: bool) -> bool:
        size = self._size or 0
        if len(buffer) < size + 2:
            if eof:
                raise _bad_chunk("chunk shorter than its size or not followed by CRLF")
            return False
        if buffer[size : size + 2] != b"\r\n":
            raise _bad_chunk("chunk shorter than its size or not followed by CRLF")
        self._parts.append(bytes(buffer[:size]))
        del buffer[: size + 2]
        self._size = None
        return True

    def _take_trailer(self, buffer: bytearray, eof: bool) -> bool:
        line = self._line(buffer, eof, "trailer")
        if line is None:
            return False
        if line in (b"\r\n", b"\n"):
            self._done = True
            return True
        self._trailers = (self._trailers or 0) + 1
        if self._trailers >= _MAX_TRAILER_LINES:
            raise _bad_chunk(f"more than {_MAX_TRAILER_LINES} trailer lines")
        return True


class HttpDate:
    """The `Date` header's value, formatted once per second (every reply carries it)."""

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._text, self._second = formatdate(second, usegmt=True), second
        return self._text


def encode_reply(response: Response, date: str, *, head_only: bool, close: bool) -> bytes:
    """Status line, headers and body as one buffer (one write: headers and body leave in one
    segment, and a client's delayed ACK never holds back a second write)."""
    status = HTTPStatus(response.status)
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        "Server: tessera",
        f"Date: {date}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
    ]
    lines += [f"{name}: {value}" for name, value in response.headers]
    if close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body

