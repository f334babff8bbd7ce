"""Freeze and thaw with leases: nothing stays frozen after the agent stops, crashes or hangs."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tessera_node.agent.cgroups import CgroupDriver, CgroupVersion
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.agent.freezer import Freezer, FreezeState, LeaseBook, run_lease_guard, thaw_all, thaw_expired

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


@pytest.fixture(params=[CgroupVersion.V2, CgroupVersion.V1])
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> CgroupTreeBuilder:
    return CgroupTreeBuilder(tmp_path, request.param, CgroupDriver.SYSTEMD)


def test_freeze_then_thaw_round_trip(tree: CgroupTreeBuilder) -> None:
    path = tree.container(UID, "a" * 64, [1])
    freezer = Freezer(tree.version)
    assert freezer.state(path) is FreezeState.THAWED
    assert freezer.request(path, True)
    tree.settle()
    assert freezer.state(path) is FreezeState.FROZEN
    freezer.request(path, False)
    tree.settle()
    assert freezer.state(path) is FreezeState.THAWED


def test_v2_freeze_is_freezing_until_the_kernel_confirms(tmp_path: Path) -> None:
    tree = CgroupTreeBuilder(tmp_path, CgroupVersion.V2)
    path = tree.container(UID, "a" * 64, [1])
    freezer = Freezer(CgroupVersion.V2)
    assert freezer.freeze_and_wait(path, timeout_s=0.01) is FreezeState.FREEZING
    tree.settle()
    assert freezer.state(path) is FreezeState.FROZEN


def test_exited_container_reads_as_gone_and_cannot_be_frozen(tree: CgroupTreeBuilder) -> None:
    missing = tree.cgroup_root / "kubepods.slice" / "nothing"
    freezer = Freezer(tree.version)
    assert freezer.state(missing) is FreezeState.GONE
    assert freezer.request(missing, True) is False


def test_only_expired_leases_are_thawed(tree: CgroupTreeBuilder) -> None:
    book = LeaseBook(tree.root / "state")
    freezer = Freezer(tree.version)
    old = tree.container(UID, "a" * 64, [1])
    fresh = tree.container(UID, "b" * 64, [2])
    for path, granted_at in ((old, 100.0), (fresh, 105.0)):
        book.grant(path, "ns/pod/c", ttl_s=10, now=granted_at)
        freezer.request(path, True)
    assert thaw_expired(book, freezer, now=111.0) == [str(old)]
    assert not tree.is_frozen_requested(old)
    assert tree.is_frozen_requested(fresh)
    book.renew([fresh], ttl_s=10, now=114.0)
    assert thaw_expired(book, freezer, now=120.0) == []
    assert thaw_all(book, freezer) == [str(fresh)]
    assert not tree.is_frozen_requested(fresh) and book.all() == []


def test_lease_guard_thaws_when_the_agent_stops_renewing(tree: CgroupTreeBuilder) -> None:
    import time

    book = LeaseBook(tree.root / "state")
    freezer = Freezer(tree.version)
    path = tree.container(UID, "a" * 64, [1])
    book.grant(path, "ns/pod/c", ttl_s=0.2, now=time.time())
    freezer.request(path, True)
    stop = threading.Event()
    guard = threading.Thread(target=run_lease_guard, args=(book, freezer, 0.05, stop))
    guard.start()
    try:
        for _ in range(100):  # bounded wait: up to 5 s
            if not tree.is_frozen_requested(path):
                break
            time.sleep(0.05)
    finally:
        stop.set()
        guard.join(5)
    assert not tree.is_frozen_requested(path)
    assert book.all() == []


def test_unreadable_lease_file_keeps_nothing_frozen(tmp_path: Path) -> None:
    book = LeaseBook(tmp_path)
    book.path.write_text("garbage")
    assert book.all() == []
