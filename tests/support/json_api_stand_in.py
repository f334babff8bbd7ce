"""A loopback HTTP server that answers JSON from a handler function: the API server stand-in of the
tests that drive the real Kubernetes client (the `kubernetes` package) end to end."""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (method, path with its query, Content-Type, decoded JSON body or None) -> (status, JSON answer)
Handle = Callable[[str, str, str, Any], tuple[int, Any]]


@contextmanager
def serving(handle: Handle) -> Iterator[str]:
    """Serve GET and PATCH requests with `handle` on 127.0.0.1 for the block; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length)) if length else None
            status, answer = handle(self.command, self.path, self.headers.get("Content-Type", ""), body)
            raw = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_PATCH = _serve

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
