"""Online wake-up from the CPU side (`wake.py`): offline work pauses on the tick an online
container's CPU wakes, before NVML names its GPU work; a wake NVML never confirms ends at once and
mutes that container's CPU signal for a while."""
from __future__ import annotations

import argparse

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent_world import Placed, World
from tessera_node.agent.cgroups import CgroupDriver, CgroupVersion
from tessera_node.agent.cli import add_arguments, settings_from_args
from tessera_node.agent.colocation import REASON_PAUSED, REASON_RESUMED
from tessera_node.agent.metrics import AgentCollector
from tessera_node.registry import AppClass, ContainerKey, ContainerName, PodUid
from tessera.model.pool_policy import PoolPolicy
from tessera_node.agent.settings import AgentSettings
from tessera_node.agent.wake import OnlineWakeDetector, WakeSettings

TICK = 0.1
KEY = ContainerKey(PodUid("pod-1"), ContainerName("main"))


def _busy(world: World, placed: Placed, pct_of_core: float) -> None:
    """The container uses `pct_of_core` percent of one core during the next tick."""
    world.tree.add_cpu_usage(placed.cgroup, int(TICK * 1e6 * pct_of_core / 100))


def _pair(world: World) -> tuple[Placed, Placed]:
    online = world.place("serve", AppClass.ONLINE)
    offline = world.place("train", AppClass.OFFLINE)
    world.run_gpu(offline, 90)
    world.run_gpu(online, 0)
    world.tick()  # the first CPU reading: a baseline, never a wake
    return online, offline


# --- the pure detector ------------------------------------------------------------------------------
class Feed:
    def __init__(self, settings: WakeSettings = WakeSettings()) -> None:
        self.detector = OnlineWakeDetector(settings)
        self.now, self.usage = 0.0, 0
        self.detector.observe(self.now, {KEY: self.usage}, set())

    def tick(self, pct_of_core: float, confirmed: bool = False, usage: int | None = -1) -> bool:
        self.now += TICK
        self.usage += int(TICK * 1e6 * pct_of_core / 100)
        reading = self.usage if usage == -1 else usage
        return KEY in self.detector.observe(self.now, {KEY: reading}, {KEY} if confirmed else set())


@pytest.mark.parametrize("pct, wakes", [(0, False), (5, False), (24, False), (25, True), (100, True), (300, True)])
def test_an_idle_online_container_wakes_at_the_cpu_threshold(pct: float, wakes: bool) -> None:
    assert Feed().tick(pct) is wakes


def test_a_wake_lasts_until_nvml_confirms_it_and_nvml_decides_after_that() -> None:
    feed = Feed()
    assert feed.tick(100) and feed.tick(100)
    assert not feed.tick(100, confirmed=True)
    # NVML's next samples may miss it between ticks: the resume window, not the CPU, holds it
    assert not any(feed.tick(100) for _ in range(5))
    assert (feed.detector.counts.wakes, feed.detector.counts.confirmed, feed.detector.counts.unconfirmed) == (1, 1, 0)


def test_an_unconfirmed_wake_ends_after_the_confirm_window_and_mutes_the_container() -> None:
    settings = WakeSettings(cpu_pct=25, confirm_s=0.5, mute_s=2.0)
    feed = Feed(settings)
    waking = [feed.tick(100) for _ in range(8)]
    assert waking[:6] == [True] * 6 and waking[6:] == [False, False], "pending for 0.5 s (6 ticks from its start), then dropped"
    assert feed.detector.counts.unconfirmed == 1
    muted = [feed.tick(100) for _ in range(18)]  # 0.8 s .. 2.6 s
    assert not any(muted), "muted for 2 s after the unconfirmed wake"
    assert feed.tick(100), "after the mute the CPU signal counts again"


def _wake_gaps(feed: Feed, ticks: int) -> list[float]:
    """Seconds from one wake's start to the next while the CPU stays busy without GPU work."""
    starts: list[float] = []
    waking = False
    for _ in range(ticks):
        now_waking = feed.tick(100)
        if now_waking and not waking:
            starts.append(feed.now)
        waking = now_waking
    return [round(b - a, 1) for a, b in zip(starts, starts[1:])]


def test_the_mute_doubles_for_each_unconfirmed_wake_in_a_row_and_a_confirmed_wake_resets_it() -> None:
    feed = Feed(WakeSettings(cpu_pct=25, confirm_s=0.3, mute_s=1.0, max_mute_s=4.0))
    gaps = _wake_gaps(feed, 200)
    # wake to wake: the confirm window (0.3 s, give or take the tick that ends it) plus a mute of
    # 1, 2, 4, then 4 s (capped)
    assert 1.2 <= gaps[0] <= 1.5, gaps
    assert [g - gaps[0] + 1.0 for g in gaps[:4]] == pytest.approx([1.0, 2.0, 4.0, 4.0], abs=0.25), gaps
    feed.tick(100, confirmed=True)  # the GPU work came after all
    for _ in range(5):
        feed.tick(0)
    assert _wake_gaps(feed, 40)[0] == pytest.approx(gaps[0], abs=0.25), "back to the first mute"


@pytest.mark.parametrize("reading", [None, 0], ids=["unreadable", "counter-went-back"])
def test_a_lost_or_reset_cpu_counter_is_no_wake(reading: int | None) -> None:
    feed = Feed()
    feed.tick(0)
    assert not feed.tick(100, usage=reading)


def test_quiet_cpu_ends_a_wake() -> None:
    feed = Feed()
    assert feed.tick(80)
    assert not feed.tick(2)
    assert feed.detector.counts.unconfirmed == 0


# --- in the agent -----------------------------------------------------------------------------------
def test_offline_pauses_on_the_tick_the_online_cpu_wakes_before_nvml_sees_it(world: World) -> None:
    online, offline = _pair(world)
    _busy(world, online, 90)
    world.tick()
    assert world.frozen(offline), "paused on the CPU wake, with NVML still reporting 0 % for the online job"
    (event,) = world.events(REASON_PAUSED)
    assert "team-a/serve/main (waking)" in event["message"]
    world.run_gpu(online, 60)  # NVML confirms
    _busy(world, online, 90)
    world.tick()
    world.run_gpu(online, 0)
    for _ in range(15):  # CPU and GPU idle: the pool's 2 s resume window runs from the last NVML sighting
        world.tick()
    assert world.frozen(offline)
    for _ in range(6):
        world.tick()
    assert not world.frozen(offline)
    (resumed,) = world.events(REASON_RESUMED)
    assert "online work idle for 2s" in resumed["message"]
    assert (world.agent.wake.counts.wakes, world.agent.wake.counts.confirmed) == (1, 1)


def test_cpu_work_without_gpu_work_pauses_offline_at_most_the_confirm_window_then_is_muted(world: World) -> None:
    online, offline = _pair(world)
    frozen = []
    for _ in range(60):  # 6 s of CPU-only work in the online container (say, request parsing)
        _busy(world, online, 100)
        world.tick()
        frozen.append(world.frozen(offline))
    confirm_ticks = round(WakeSettings().confirm_s / TICK)
    resumed_at = frozen.index(False)
    assert confirm_ticks <= resumed_at <= confirm_ticks + 1, "paused for the confirm window (1 s), no longer"
    assert not any(frozen[resumed_at:]), "muted after the unconfirmed wake: offline work runs on"
    (resumed,) = world.events(REASON_RESUMED)
    assert "CPU woke but no GPU work followed" in resumed["message"]
    assert world.agent.wake.counts.unconfirmed == 1


def test_cpu_wake_off_leaves_colocation_to_nvml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    world = World(tmp_path, policy=PoolPolicy(online_offline=True))
    world.settings = AgentSettings(node_name=world.settings.node_name, state_dir=world.settings.state_dir, slow_every=1,
                                   pods_refresh_every=1_000_000, online_wake=WakeSettings(cpu_pct=0))
    world.agent = world.new_agent()
    online, offline = _pair(world)
    _busy(world, online, 100)
    world.tick()
    assert not world.frozen(offline)


def test_online_containers_without_offline_neighbours_are_not_watched(world: World) -> None:
    online = world.place("serve", AppClass.ONLINE, gpu=0)
    offline = world.place("train", AppClass.OFFLINE, gpu=1)
    world.tick()
    _busy(world, online, 100)
    world.tick()
    assert not world.frozen(offline)
    assert world.agent.wake.counts.wakes == 0


@pytest.mark.parametrize(
    "version, driver",
    [(CgroupVersion.V2, CgroupDriver.SYSTEMD), (CgroupVersion.V2, CgroupDriver.CGROUPFS), (CgroupVersion.V1, CgroupDriver.CGROUPFS), (CgroupVersion.V1, CgroupDriver.SYSTEMD)],
)
def test_cpu_wake_reads_every_cgroup_layout(tmp_path, version: CgroupVersion, driver: CgroupDriver) -> None:  # type: ignore[no-untyped-def]
    world = World(tmp_path, version=version, driver=driver, policy=PoolPolicy(online_offline=True))
    online, offline = _pair(world)
    assert world.agent.deps.locator.cpu_usage_usec(online.cgroup) == 0
    _busy(world, online, 50)
    world.tick()
    assert world.frozen(offline)


def test_wake_counts_are_served_as_metrics(world: World) -> None:
    online, _ = _pair(world)
    for _ in range(15):
        _busy(world, online, 100)
        world.tick()
    registry = CollectorRegistry()
    registry.register(AgentCollector(world.agent.build_view))
    samples = {(s.name, s.labels.get("outcome")): s.value for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}
    assert samples[("tessera_agent_online_wakes_total", "wake")] == 1
    assert samples[("tessera_agent_online_wakes_total", "unconfirmed")] == 1
    assert samples[("tessera_agent_online_wakes_total", "confirmed")] == 0


@pytest.mark.parametrize("value, ok", [("0", True), ("25", True), ("100", True), ("-1", False), ("101", False), ("lots", False)])
def test_online_wake_cpu_flag(value: str, ok: bool, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    if ok:
        settings = settings_from_args(parser.parse_args(["--online-wake-cpu", value, "--node-name", "n"]))
        assert settings.online_wake.cpu_pct == float(value)
        assert settings.online_wake.enabled is (float(value) > 0)
        return
    with pytest.raises(SystemExit):
        parser.parse_args(["--online-wake-cpu", value])
    assert "not a percent of one core" in capsys.readouterr().err
