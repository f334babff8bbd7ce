"""Metrics over loopback HTTP: per-GPU health, Xid count, allocation; kill counters."""
from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_world import World
from prometheus_client.parser import text_string_to_metric_families

from tessera.monitoring.exposition import conformance_problems
from tessera_node.agent.metrics import METRICS, PAUSE_BUCKETS, LatencyCounts, serve_metrics
from tessera_node.registry import AppClass
from tessera.model.pool_policy import PoolPolicy


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[World, str]]:
    world = World(tmp_path, policy=PoolPolicy(memory_enforcement="enforce"))
    server, _thread, port = serve_metrics(world.agent.view.get, "127.0.0.1", 0)
    try:
        yield world, f"http://127.0.0.1:{port}/metrics"
    finally:
        server.shutdown()


@pytest.fixture
def colocated(tmp_path: Path) -> Iterator[tuple[World, str]]:
    """A pool with online/offline co-location on, its agent's /metrics on loopback."""
    world = World(tmp_path, policy=PoolPolicy(online_offline=True, offline_resume_idle_s=2.0))
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


def test_the_page_serves_exactly_the_declared_families(colocated: tuple[World, str]) -> None:
    world, url = colocated
    online = world.place("serve", AppClass.ONLINE, gpu=0)
    offline = world.place("train", AppClass.OFFLINE, gpu=0)
    world.run_gpu(offline, 90)
    world.run_gpu(online, 60)
    world.tick()
    scrape(url)
    world.tick()
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    assert conformance_problems(METRICS, text) == []


def test_pause_latency_is_measured_from_the_sample_to_the_freeze(colocated: tuple[World, str]) -> None:
    world, url = colocated
    online = world.place("serve", AppClass.ONLINE, gpu=0)
    offline = world.place("train", AppClass.OFFLINE, gpu=0)
    world.run_gpu(offline, 90)
    world.tick()
    apply = world.agent.pauses.apply

    def slow_freeze(*args, **kwargs):  # type: ignore[no-untyped-def]
        world.clock.now += 0.03  # the cgroup takes 30 ms to settle
        return apply(*args, **kwargs)

    world.agent.pauses.apply = slow_freeze  # type: ignore[method-assign]
    world.run_gpu(online, 60)
    world.tick()
    assert world.frozen(offline)
    scrape(url)
    world.tick()
    metrics = scrape(url)
    buckets = {labels["le"]: value for labels, value in metrics["tessera_agent_offline_pause_seconds_bucket"]}
    assert metrics["tessera_agent_offline_pause_seconds_count"] == [({}, 1.0)]
    assert (buckets["0.025"], buckets["0.05"], buckets["+Inf"]) == (0.0, 1.0, 1.0)
    assert abs(metrics["tessera_agent_offline_pause_seconds_sum"][0][1] - 0.03) < 1e-9


@pytest.mark.parametrize(("seconds", "slot"), [(0.0, 0), (0.001, 0), (0.0011, 1), (2.5, 10), (3.0, 11)])
def test_latency_counts_put_each_observation_in_its_bucket(seconds: float, slot: int) -> None:
    counts = LatencyCounts().observe(seconds)
    assert counts.counts[slot] == 1 and sum(counts.counts) == 1
    assert [v for _, v in counts.cumulative()] == [0.0] * slot + [1.0] * (len(PAUSE_BUCKETS) + 1 - slot)
