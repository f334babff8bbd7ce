"""Admission latency of the Tessera webhook over HTTPS on 127.0.0.1 (prints figures; asserts nothing).

    python bench/webhook_latency.py [--requests 2000] [--clients 8]

Each client keeps one TLS connection open (as the API server does) and sends AdmissionReviews for
a two-container pod with qGPU names on an opted-in pool (the most work per request).
"""
from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import ssl
import statistics
import threading
import time

from tessera.model import contract
from tessera.webhook.server import ServerSettings, WebhookHttpServer, serve
from tessera.webhook.settings import WebhookSettings
from tessera.webhook.tls import generate_bundle


def _review(i: int) -> bytes:
    pod = {
        "metadata": {"generateName": "job-", "namespace": "ml"},
        "spec": {
            "nodeSelector": {contract.LABEL_POOL: "a"},
            "containers": [
                {"name": "main", "image": "x", "resources": {"limits": {contract.QGPU_CORE: "40", contract.QGPU_MEMORY: "5"}}},
                {"name": "side", "image": "y"},
            ],
        },
    }
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": f"00000000-0000-0000-0000-{i:012d}", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": pod},
    }
    return json.dumps(body).encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    bundle = generate_bundle(("localhost",), dt.datetime.now(dt.timezone.utc))
    settings = WebhookSettings(shared_pools=frozenset({"a"}), qgpu_alias_pools=frozenset({"a"}))
    started: list[WebhookHttpServer] = []
    ready = threading.Event()

    def on_ready(server: WebhookHttpServer) -> None:
        started.append(server)
        ready.set()

    threading.Thread(
        target=serve, args=(ServerSettings(host="127.0.0.1", port=0), settings, bundle), kwargs={"ready": on_ready}, daemon=True
    ).start()
    ready.wait(10)
    port = started[0].server_address[1]
    context = ssl.create_default_context(cadata=bundle.ca_pem)
    latencies: list[float] = []
    lock = threading.Lock()
    per_client = args.requests // args.clients

    def client(offset: int) -> None:
        conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
        mine = []
        for i in range(per_client):
            body = _review(offset + i)
            t0 = time.perf_counter()
            conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            mine.append(time.perf_counter() - t0)
            assert resp.status == 200
        conn.close()
        with lock:
            latencies.extend(mine)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c * per_client,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    started[0].shutdown()
    ms = sorted(x * 1000 for x in latencies)
    print(f"requests={len(ms)} clients={args.clients} throughput={len(ms) / wall:.0f}/s")
    print(f"latency ms: p50={statistics.median(ms):.2f} p90={ms[int(len(ms) * 0.9)]:.2f} p99={ms[int(len(ms) * 0.99)]:.2f} max={ms[-1]:.2f}")


if __name__ == "__main__":
    main()
