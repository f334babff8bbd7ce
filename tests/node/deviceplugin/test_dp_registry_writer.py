"""The registry writer keeps writes off container starts, but never starves them."""
from __future__ import annotations

import time
from pathlib import Path

from tessera.model.contract import GpuShare
from tessera_node.registry import ContainerName, ContainerRegistry, PodUid, RegisteredContainer
from tessera_node.deviceplugin.registry_writer import RegistryWriter

RECORD = RegisteredContainer(PodUid("u1"), "ns", "p", ContainerName("main"), (GpuShare(0, "GPU-a", 30, 1024),))


def test_a_record_is_written_even_while_containers_keep_starting(tmp_path: Path) -> None:
    registry = ContainerRegistry(tmp_path)
    writer = RegistryWriter(registry, quiet_s=0.05, max_delay_s=0.1)
    writer.submit(RECORD)
    written_during_activity = False
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and not written_during_activity:
        writer.note_activity()  # a start every 10 ms: never 50 ms of quiet
        time.sleep(0.01)
        written_during_activity = registry.get(RECORD.key) is not None
    writer.close()
    assert written_during_activity


def test_close_writes_everything_still_queued(tmp_path: Path) -> None:
    registry = ContainerRegistry(tmp_path)
    writer = RegistryWriter(registry, quiet_s=10.0, max_delay_s=10.0)
    records = [RegisteredContainer(PodUid(f"u{i}"), "ns", f"p{i}", ContainerName("main"), RECORD.shares) for i in range(3)]
    for record in records:
        writer.submit(record)
    writer.close()
    assert sorted(r.pod_name for r in registry.all()) == ["p0", "p1", "p2"]


def test_a_burst_of_starts_is_written_in_one_rewrite(tmp_path: Path) -> None:
    """N records queued during a burst cost one rewrite of the file, not N rewrites of up to N
    records each (which held the GIL for the whole burst on a dense node)."""
    registry = ContainerRegistry(tmp_path)
    writer = RegistryWriter(registry, quiet_s=0.05, max_delay_s=5.0)
    records = [RegisteredContainer(PodUid(f"u{i}"), "ns", f"p{i}", ContainerName("main"), RECORD.shares) for i in range(50)]
    for record in records:
        writer.submit(record)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and len(registry.all()) < 50:
        time.sleep(0.01)
    writer.close()
    assert sorted(r.pod_name for r in registry.all()) == sorted(f"p{i}" for i in range(50))
    assert writer.writes == 1


def test_the_latest_record_of_a_container_wins_within_a_batch(tmp_path: Path) -> None:
    registry = ContainerRegistry(tmp_path)
    writer = RegistryWriter(registry, quiet_s=10.0, max_delay_s=10.0)
    writer.submit(RECORD)
    newer = RegisteredContainer(RECORD.pod_uid, RECORD.namespace, RECORD.pod_name, RECORD.container, (GpuShare(1, "GPU-b", 30, 2048),))
    writer.submit(newer)
    writer.close()
    assert registry.all() == [newer]


def test_pods_started_one_at_a_time_do_not_cost_a_rewrite_each(tmp_path: Path) -> None:
    """Starts 80 ms apart leave the 50 ms quiet gap every time; writes are still spaced."""
    registry = ContainerRegistry(tmp_path)
    writer = RegistryWriter(registry, quiet_s=0.05, max_delay_s=2.0, min_interval_s=0.5)
    records = [RegisteredContainer(PodUid(f"u{i}"), "ns", f"p{i}", ContainerName("main"), RECORD.shares) for i in range(12)]
    for record in records:
        writer.submit(record)
        time.sleep(0.08)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and len(registry.all()) < 12:
        time.sleep(0.01)
    assert sorted(r.pod_name for r in registry.all()) == sorted(f"p{i}" for i in range(12)), "every record written within max_delay"
    assert writer.writes <= 4, f"{writer.writes} rewrites for 12 starts in ~1 s"
    writer.close()
