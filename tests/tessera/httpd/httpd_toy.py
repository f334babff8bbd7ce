"""A toy service on `tessera.httpd` (the extender, webhook and agent tests drive the real ones).
A uniquely named module (not `conftest`), so test modules can import it unambiguously."""
from __future__ import annotations

import http.client
import threading
import time

from tessera.httpd import HardenedHTTPServer, HttpLimits, Request, Response, Routes, json_response, parse_json


class ToyService:
    """GET /ok; POST /json (decodes the body, answers its type); POST /slow (waits for `release`);
    GET /bug (raises: a bug of ours); GET /big (4 MiB, more than a socket's buffers hold)."""

    def __init__(self, limits: HttpLimits) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.observed: list[tuple[str, str, int]] = []
        endpoints = {
            "/ok": {"GET": lambda r: Response(200, b"ok\n", "text/plain")},
            "/json": {"POST": self._json},
            "/slow": {"POST": self._slow},
            "/bug": {"GET": self._bug},
            "/big": {"GET": lambda r: Response(200, b"x" * (4 * 1024 * 1024), "text/plain")},
        }
        self.server = HardenedHTTPServer(("127.0.0.1", 0), Routes(endpoints.get, self._observe), limits, name="toy")
        self.thread = self.server.start()

    def _observe(self, path: str, method: str, status: int, seconds: float) -> None:
        self.observed.append((path, method, status))

    @staticmethod
    def _json(request: Request) -> Response:
        return json_response(200, {"type": type(parse_json(request.body)).__name__, "bytes": len(request.body)})

    def _slow(self, request: Request) -> Response:
        self.entered.set()
        self.release.wait(30)
        return json_response(200, {"slow": True})

    @staticmethod
    def _bug(request: Request) -> Response:
        raise RuntimeError("a bug")

    @property
    def port(self) -> int:
        return self.server.port

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.server.active_connections() == 0:
                return True
            time.sleep(0.01)
        return False


def start_toy(**limits: float) -> ToyService:
    base = {"max_body_bytes": 16384, "request_timeout_s": 2.0, "idle_timeout_s": 30.0}
    return ToyService(HttpLimits(**{**base, **limits}))  # type: ignore[arg-type]


def get_ok(port: int) -> int:
    """The status of one GET /ok on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/ok")
        return conn.getresponse().status
    finally:
        conn.close()
