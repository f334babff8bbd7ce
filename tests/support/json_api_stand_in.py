"""API server stand-ins for the tests that drive the real Kubernetes client (the `kubernetes`
package) end to end:

- `serving(handle)`: a loopback HTTP server that answers JSON from a handler function, for tests
  that script each answer themselves;
- `loopback_api(directory)`: the loopback Kubernetes API server (`tessera.kube.loopback`) over an
  in-memory store, with a kubeconfig for the real client (in process, or a
  `tessera ... --kubeconfig FILE` subprocess) and injectable faults (`.server.faults`).
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tessera.kube.client import ClientSettings, KubernetesClientApi
from tessera.kube.fake import FakeKubeApi
from tessera.kube.loopback import LoopbackApiServer

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


@dataclass(frozen=True)
class Loopback:
    fake: FakeKubeApi
    server: LoopbackApiServer
    kubeconfig: Path

    def client(self, *, request_timeout_s: float = 5.0) -> KubernetesClientApi:
        """A real client of the server; `request_timeout_s` bounds each call."""
        return KubernetesClientApi.connect(ClientSettings(kubeconfig=str(self.kubeconfig), request_timeout_s=request_timeout_s))


@contextmanager
def loopback_api(directory: Path, fake: FakeKubeApi | None = None) -> Iterator[Loopback]:
    """Serve `fake` (default: an empty store) for the block; the kubeconfig is written in `directory`."""
    store = fake or FakeKubeApi()
    server = LoopbackApiServer(store)
    try:
        yield Loopback(store, server, server.write_kubeconfig(directory / "loopback.kubeconfig"))
    finally:
        server.close()
        store.close()
