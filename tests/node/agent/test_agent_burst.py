"""burst-share: alone a container uses the whole GPU; under contention each gets its share."""
from __future__ import annotations

from pathlib import Path

import pytest
from agent_world import World

from tessera.model.contract import GpuShare
from tessera_node.agent.burst import BurstController, slot_fractions
from tessera_node.registry import ContainerKey, ContainerName, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy

BURST = PoolPolicy(sharing="burst-share")


def _c(uid: str, core: int, uuid: str = "GPU-0") -> RegisteredContainer:
    return RegisteredContainer(PodUid(uid), "ns", uid, ContainerName("c"), (GpuShare(0, uuid, core, 0),), None, BURST)


def _run_fraction(cores: dict[str, int], period_s: float = 2.0, tick_s: float = 0.05, seconds: float = 20.0) -> dict[str, float]:
    containers = [_c(uid, core) for uid, core in cores.items()]
    ctl = BurstController(period_s=period_s)
    running = {c.key: 0 for c in containers}
    steps = int(seconds / tick_s)
    for i in range(steps):
        throttled = ctl.step(i * tick_s, containers, [(c.key, "GPU-0") for c in containers])
        for c in containers:
            running[c.key] += c.key not in throttled
    return {k.pod_uid: v / steps for k, v in running.items()}


@pytest.mark.parametrize(
    "cores, expected",
    [
        ({"a": 60, "b": 30}, {"a": 2 / 3, "b": 1 / 3}),
        ({"a": 50, "b": 25, "c": 25}, {"a": 0.5, "b": 0.25, "c": 0.25}),
        ({"a": 40}, {"a": 1.0}),  # alone: the whole GPU
    ],
)
def test_contending_containers_get_time_in_proportion_to_their_share(cores: dict[str, int], expected: dict[str, float]) -> None:
    got = _run_fraction(cores)
    for uid, fraction in expected.items():
        assert got[uid] == pytest.approx(fraction, abs=0.03)
        assert got[uid] >= cores[uid] / 100 - 0.03, "never below the guaranteed share"


def test_throttled_container_stays_in_contention_while_frozen() -> None:
    a, b = _c("a", 60), _c("b", 30)
    ctl = BurstController(period_s=2.0)
    ctl.step(0.0, [a, b], [(a.key, "GPU-0"), (b.key, "GPU-0")])
    # b is frozen during a's slot and shows no utilisation; contention must not end
    throttled = ctl.step(0.5, [a, b], [(a.key, "GPU-0")])
    assert throttled == {b.key}


def test_contention_ends_when_a_neighbour_goes_idle() -> None:
    a, b = _c("a", 60), _c("b", 30)
    ctl = BurstController(period_s=1.0, sticky_periods=1.5)
    ctl.step(0.0, [a, b], [(a.key, "GPU-0"), (b.key, "GPU-0")])
    assert ctl.step(2.0, [a, b], [(b.key, "GPU-0")]) == set()


def test_slot_fractions() -> None:
    ka, kb = ContainerKey(PodUid("a"), ContainerName("c")), ContainerKey(PodUid("b"), ContainerName("c"))
    assert slot_fractions({ka: 60, kb: 30}) == {ka: pytest.approx(2 / 3), kb: pytest.approx(1 / 3)}


def test_agent_throttles_burst_share_containers_under_contention(tmp_path: Path) -> None:
    world = World(tmp_path, policy=BURST)
    a = world.place("a", None, core=60)
    b = world.place("b", None, core=30)
    world.run_gpu(a, 70)
    world.tick()
    assert not world.frozen(a) and not world.frozen(b)
    world.run_gpu(b, 70)
    frozen_ticks = {"a": 0, "b": 0}
    for _ in range(40):
        world.tick(0.05)
        frozen_ticks["a"] += world.frozen(a)
        frozen_ticks["b"] += world.frozen(b)
    assert frozen_ticks["b"] > frozen_ticks["a"] > 0
    rows = {r.pod: r for r in world.agent.build_view().containers}
    assert rows["b"].throttle_events >= 1
