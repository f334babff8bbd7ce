"""Metrics over loopback HTTP: per-GPU health, Xid count, allocation; kill counters."""
from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_world import World
from prometheus_client.parser import text_string_to_metric_families

from tessera_node.agent.metrics import serve_metrics
from tessera_node.agent.registry import MemoryEnforcement, PoolPolicy


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[World, str]]:
    world = World(tmp_path, policy=PoolPolicy(memory_enforcement=MemoryEnforcement.ENFORCE))
    server, _thread, port = serve_metrics(world.agent.view.get, "127.0.0.1", 0)
    try:
        yield world, f"http://127.0.0.1:{port}/metrics"
    finally:
        server.shutdown()


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def by_gpu(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> dict[str, float]:
    return {labels["gpu_index"]: value for labels, value in metrics[name]}


def test_xid_errors_and_unresponsive_gpu_are_reported(served: tuple[World, str]) -> None:
    world, url = served
    world.sim.inject_xid(0, 13, "an application's own fault: the GPU stays healthy")
    world.sim.inject_xid(1, 48, "double-bit ECC")
    world.tick()
    scrape(url)  # a scrape asks the loop for a fresh view
    world.tick()
    metrics = scrape(url)
    assert by_gpu(metrics, "tessera_gpu_xid_errors_total") == {"0": 1, "1": 1}
    assert by_gpu(metrics, "tessera_gpu_healthy") == {"0": 1.0, "1": 0.0}


def test_unresponsive_gpu_is_unhealthy(served: tuple[World, str]) -> None:
    world, url = served
    world.sim.set_responsive(0, False)
    world.tick()
    scrape(url)
    world.tick()
    assert by_gpu(scrape(url), "tessera_gpu_healthy") == {"0": 0.0, "1": 1.0}


def test_allocation_and_kill_counters(served: tuple[World, str]) -> None:
    world, url = served
    a = world.place("a", None, gpu=0, core=40, memory_mib=2048)
    world.place("b", None, gpu=0, core=30, memory_mib=1024)
    world.run_gpu(a, 50, memory_mib=4096)
    world.tick()
    scrape(url)
    world.tick()
    metrics = scrape(url)
    assert by_gpu(metrics, "tessera_gpu_core_allocated_percent") == {"0": 70, "1": 0}
    assert by_gpu(metrics, "tessera_gpu_memory_allocated_bytes")["0"] == 3072 * 2**20
    kills = {labels["pod"]: value for labels, value in metrics["tessera_container_gpu_memory_kills_total"]}
    assert kills == {"a": 1.0, "b": 0.0}
