"""Bursts of kube-scheduler clients over real HTTP: 64 at once, with kept-alive connections and with
a new connection per request. No connection is refused or reset, every reply is an answer, and
binds never over-commit a GPU (audited against the fake API server's final state)."""
from __future__ import annotations

import http.client
import json
import queue
import random
import sys
import threading
from pathlib import Path

import pytest
from audit import audit
from extender_harness import GIB, Harness, node_manifest, pod_manifest, rendered_scheduler_config, wait_until
from kube_scheduler_emulator import ExtenderClient, ExtenderEntry, KubeSchedulerEmulator

from tessera.alloc import PlacementPolicy

sys.path.insert(0, str(Path(__file__).parents[1] / "httpd"))
from raw_http import burst  # noqa: E402

CLIENTS = 64
GPU_MEMORY = 16 * GIB
# an answer kube-scheduler reads as "the extender failed" (anything but 200: "failed <verb> with
# extender at URL ..."); capacity taken by a concurrent bind comes back as 200 with
# ExtenderBindingResult.Error, which is not one of these
_HTTP_FAILURES = ("failed ", "bind: failed ")


class NewConnectionClient(ExtenderClient):
    """A client that asks for `Connection: close`: every request opens a new TCP connection."""

    def post_raw(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        return super().post_raw(path, body, {"Connection": "close", **(headers or {})})


def _client(port: int, keep_alive: bool) -> ExtenderClient:
    return ExtenderClient("127.0.0.1", port) if keep_alive else NewConnectionClient("127.0.0.1", port)


@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "new-connection-per-request"])
def test_64_concurrent_schedulers_never_overcommit_and_lose_no_connection(harness: Harness, keep_alive: bool) -> None:
    harness.policy = PlacementPolicy.FRAGMENTATION_AWARE
    for i in range(4):
        harness.api.create_node(node_manifest(f"n{i}", gpus=2, memory_mib=GPU_MEMORY))
    service = harness.start()
    rng = random.Random(11)
    work: queue.Queue[str] = queue.Queue()
    for i in range(2 * CLIENTS):
        core = rng.choice([10, 20, 25, 30, 40, 50, 60, 100])
        harness.api.create_pod(pod_manifest(f"p{i}", ("main", core, rng.choice([None, 2 * GIB, 4 * GIB]))))
        work.put(f"p{i}")
    entry = ExtenderEntry.from_config(rendered_scheduler_config())
    start = threading.Barrier(CLIENTS)
    outcomes: dict[str, str | None] = {}
    failures: list[str] = []
    lock = threading.Lock()

    def scheduler_thread(seed: int) -> None:
        client = _client(service.port, keep_alive)
        scheduler = KubeSchedulerEmulator(client, harness.api, entry, seed=seed)
        try:
            start.wait(30)
            while True:
                try:
                    name = work.get_nowait()
                except queue.Empty:
                    return
                node = None
                for _ in range(3):  # kube-scheduler retries a pod whose bind lost a race
                    attempt = scheduler.schedule("default", name)
                    if attempt.error.startswith(_HTTP_FAILURES):
                        with lock:
                            failures.append(f"{name}: {attempt.error}")
                    if attempt.node:
                        node = attempt.node
                        break
                with lock:
                    outcomes[name] = node
        except Exception as exc:  # a refused/reset connection or a malformed reply
            with lock:
                failures.append(f"client {seed}: {type(exc).__name__}: {exc}")
        finally:
            client.close()

    threads = [threading.Thread(target=scheduler_thread, args=(seed,)) for seed in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert failures == []
    assert len(outcomes) == 2 * CLIENTS
    placed = [n for n, node in outcomes.items() if node]
    assert len(placed) >= 8  # 8 GPUs: at least one pod each
    usage = audit(harness.api, gpu_memory_mib=GPU_MEMORY)  # raises on any over-commit
    assert wait_until(lambda: service.state.summary()[3] * 100 == pytest.approx(sum(usage.values())))
    assert service.state.summary()[1] == len(placed)


@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "new-connection-per-request"])
def test_64_binds_of_one_pod_at_once_reserve_once(harness: Harness, keep_alive: bool) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1))
    service = harness.start()
    pod = harness.api.create_pod(pod_manifest("p", ("main", 60, None)))
    meta = pod["metadata"]
    body = {"PodName": "p", "PodNamespace": "default", "PodUID": meta["uid"], "Node": "n1"}

    def bind(conn: http.client.HTTPConnection, client: int, i: int) -> int:
        headers = {"Content-Type": "application/json"} if keep_alive else {"Content-Type": "application/json", "Connection": "close"}
        conn.request("POST", "/bind", body=json.dumps(body).encode(), headers=headers)
        response = conn.getresponse()
        assert response.read() == b'{"Error":""}'
        return response.status

    result = burst(
        lambda: http.client.HTTPConnection("127.0.0.1", service.port, timeout=60), bind, clients=CLIENTS, requests_per_client=2, keep_alive=keep_alive
    )
    assert result.errors == [] and result.statuses == [200] * (2 * CLIENTS)
    assert harness.api.bind_calls == 1
    assert service.state.summary()[3] == pytest.approx(0.6)
    harness.api.create_pod(pod_manifest("q", ("main", 50, None)))
    assert harness.scheduler(service).schedule("default", "q").node is None  # 60 % + 50 % > 100 %


@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "new-connection-per-request"])
def test_metrics_and_health_survive_a_burst_of_scrapers(harness: Harness, keep_alive: bool) -> None:
    harness.api.create_node(node_manifest("n1"))
    service = harness.start()

    def scrape(conn: http.client.HTTPConnection, client: int, i: int) -> int:
        path = "/metrics" if i % 2 else "/healthz"
        conn.request("GET", path, headers={} if keep_alive else {"Connection": "close"})
        response = conn.getresponse()
        text = response.read().decode()
        assert ("tessera_extender_gpus 2.0" in text) if path == "/metrics" else text.startswith("ok")
        return response.status

    result = burst(
        lambda: http.client.HTTPConnection("127.0.0.1", service.port, timeout=60), scrape, clients=CLIENTS, requests_per_client=4, keep_alive=keep_alive
    )
    assert result.errors == [] and result.statuses == [200] * (4 * CLIENTS)
