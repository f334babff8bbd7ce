"""The request line and headers, taken from a connection's buffer once they have arrived in full.

What is accepted and how each refusal reads follow the standard library's
`http.server.BaseHTTPRequestHandler.parse_request` and `http.client.parse_headers` (CPython,
tag v3.11.7, `Lib/http/server.py` and `Lib/http/client.py`), which this server ran on before
its connections moved to an event loop: the same versions are accepted, `Connection` and
`Expect: 100-continue` mean the same, and the same malformed heads are refused with the same
reasons, except that every refusal is a 4xx (the stdlib answers `HTTP/2.0` with 505). Two bounds
are ours: the request line (414 beyond 64 KiB, the stdlib's own line bound) and the whole head
(431 beyond `MAX_HEAD_BYTES`), so that a client trickling header lines holds a bounded buffer.

Each call scans only the bytes that arrived since the last one: a client sending its head one
byte at a time costs linear time, not quadratic.
"""
from __future__ import annotations

import http.client
import io
from dataclasses import dataclass
from email.message import Message
from http import HTTPStatus
from typing import Final

from tessera.httpd.framing import HttpError

MAX_REQUEST_LINE: Final = 65536
"""The stdlib's bound on one line (`_MAXLINE` in `Lib/http/client.py`), answered with 414 here."""
MAX_HEADER_LINE: Final = 65536
"""The same bound on a header line: 431."""
MAX_HEAD_BYTES: Final = 256 * 1024
"""Request line and headers together. kube-scheduler, the API server and Prometheus send a few
hundred bytes; the stdlib alone would accept 100 header lines of 64 KiB each."""
_MAX_REASON: Final = 200  # characters of the client's own text quoted back in a refusal


class NoRequest(Exception):
    """An empty request line: the stdlib closes such a connection without a reply, and so do we."""


@dataclass(frozen=True)
class Head:
    method: str
    target: str
    """The request target as sent (path and query), a leading `//` reduced to `/`."""
    version: str
    """`HTTP/1.x` as sent, or `HTTP/0.9` for a two-word request line."""
    headers: Message
    keep_alive: bool
    """HTTP/1.1 without `Connection: close`, or `Connection: keep-alive`."""
    expect_continue: bool


def _refusal(status: HTTPStatus, reason: str) -> HttpError:
    return HttpError(status, reason, close=True)


def _quoted(text: str) -> str:
    return repr(text[:_MAX_REASON] + ("..." if len(text) > _MAX_REASON else ""))


class HeadReader:
    """Finds the end of one request head in a buffer and parses it."""

    def __init__(self) -> None:
        self._line_end = -1  # index of the request line's "\n", once seen
        self._scanned = 0  # bytes already searched for the line or the blank line

    def take(self, buffer: bytearray, eof: bool) -> Head | None:
        """The head, removed from the front of `buffer`, once its blank line has arrived; None
        while more must arrive. Raises HttpError (close=True) for a head that is refused and
        NoRequest for an empty request line."""
        if self._line_end < 0:
            self._line_end = buffer.find(b"\n", self._scanned, MAX_REQUEST_LINE)
            if self._line_end < 0:
                self._scanned = min(len(buffer), MAX_REQUEST_LINE)
                if len(buffer) >= MAX_REQUEST_LINE:
                    raise _refusal(HTTPStatus.REQUEST_URI_TOO_LONG, f"request line longer than {MAX_REQUEST_LINE} bytes")
                return self._incomplete(buffer, eof)
            if not buffer[: self._line_end + 1].strip():
                raise NoRequest()
            self._scanned = self._line_end
        end = self._blank_line_end(buffer)
        if end < 0:
            self._scanned = max(self._line_end, len(buffer) - 2)
            self._check_partial_head(buffer)
            return self._incomplete(buffer, eof)
        if end > MAX_HEAD_BYTES:
            raise _refusal(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"request head longer than {MAX_HEAD_BYTES} bytes")
        raw = bytes(buffer[:end])
        del buffer[:end]
        self._line_end, self._scanned = -1, 0
        return _parse(raw, raw.index(b"\n") + 1)

    def _blank_line_end(self, buffer: bytearray) -> int:
        """Where the head ends: after the first empty line ("\\r\\n" or "\\n") after the
        request line, as `http.client` reads header lines; -1 while it has not arrived. Both
        searches stop within `MAX_HEAD_BYTES`: a body behind the head is never scanned."""
        limit = MAX_HEAD_BYTES + 3
        crlf = buffer.find(b"\n\r\n", self._scanned, limit)
        lf = buffer.find(b"\n\n", self._scanned, crlf + 2 if crlf >= 0 else limit)
        if lf >= 0:
            return lf + 2
        return crlf + 3 if crlf >= 0 else -1

    def _check_partial_head(self, buffer: bytearray) -> None:
        if len(buffer) > MAX_HEAD_BYTES:
            raise _refusal(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"request head longer than {MAX_HEAD_BYTES} bytes")
        last_line = len(buffer) - (buffer.rfind(b"\n") + 1)
        if last_line > MAX_HEADER_LINE:
            raise _refusal(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"Line too long: got more than {MAX_HEADER_LINE} bytes when reading header line"
            )

    @staticmethod
    def _incomplete(buffer: bytearray, eof: bool) -> None:
        if eof and buffer.strip():
            raise _refusal(HTTPStatus.BAD_REQUEST, "request head incomplete: the connection ended before its blank line")
        if eof:
            raise NoRequest()
        return None


def _parse(raw: bytes, header_start: int) -> Head:
    """`BaseHTTPRequestHandler.parse_request`, on a head that has arrived in full."""
    request_line = raw[:header_start].decode("iso-8859-1").rstrip("\r\n")
    words = request_line.split()
    if not words:
        raise NoRequest()
    keep_alive = False
    version = "HTTP/0.9"
    if len(words) >= 3:
        version = words[-1]
        number = _version_number(version)
        if number is None:
            raise _refusal(HTTPStatus.BAD_REQUEST, f"Bad request version ({_quoted(version)})")
        if number >= (2, 0):
            raise _refusal(HTTPStatus.BAD_REQUEST, f"Invalid HTTP version ({version.split('/', 1)[1][:_MAX_REASON]}); send HTTP/1.1")
        keep_alive = number >= (1, 1)
    if not 2 <= len(words) <= 3:
        raise _refusal(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({_quoted(request_line)})")
    method, target = words[:2]
    if len(words) == 2:
        keep_alive = False
        if method != "GET":
            raise _refusal(HTTPStatus.BAD_REQUEST, f"Bad HTTP/0.9 request type ({_quoted(method)})")
    if target.startswith("//"):
        target = "/" + target.lstrip("/")
    try:
        headers = http.client.parse_headers(io.BytesIO(raw[header_start:]))
    except http.client.LineTooLong as exc:
        raise _refusal(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"Line too long: {exc}") from None
    except http.client.HTTPException as exc:
        raise _refusal(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"Too many headers: {exc}") from None
    connection = (headers.get("Connection") or "").lower()
    if connection == "close":
        keep_alive = False
    elif connection == "keep-alive":
        keep_alive = True
    expect = (headers.get("Expect") or "").lower() == "100-continue" and version >= "HTTP/1.1"
    return Head(method, target, version, headers, keep_alive, expect)


def _version_number(version: str) -> tuple[int, int] | None:
    if not version.startswith("HTTP/"):
        return None
    parts = version.split("/", 1)[1].split(".")
    if len(parts) != 2 or any(not (p.isascii() and p.isdigit()) or len(p) > 10 for p in parts):
        return None
    return int(parts[0]), int(parts[1])
