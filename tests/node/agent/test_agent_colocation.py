"""Online/offline co-location: offline work pauses while online work on its GPU is active."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tessera.model.contract import GpuShare
from tessera_node.agent.cgroups import CgroupDriver, CgroupVersion
from tessera_node.agent.colocation import REASON_PAUSED, REASON_RESUMED, ColocationController
from tessera_node.registry import AppClass, ContainerKey, ContainerName, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy

from agent_world import World


def test_offline_pauses_within_one_tick_of_online_activity_and_names_the_cause(world: World) -> None:
    online = world.place("serve", AppClass.ONLINE, gpu=0)
    offline = world.place("train", AppClass.OFFLINE, gpu=0)
    other_gpu = world.place("train-other", AppClass.OFFLINE, gpu=1)
    world.run_gpu(offline, 90)
    world.run_gpu(other_gpu, 90)
    world.run_gpu(online, 0)
    world.tick()
    assert not world.frozen(offline)

    world.run_gpu(online, 60)
    world.tick()
    assert world.frozen(offline)
    assert not world.frozen(other_gpu), "offline work on another GPU must keep running"
    (event,) = world.events(REASON_PAUSED)
    assert event["involvedObject"]["name"] == "train"
    assert "team-a/serve/main" in event["message"]


@pytest.mark.parametrize("idle_for, still_frozen", [(1.0, True), (1.9, True), (2.1, False)])
def test_offline_resumes_only_after_the_pool_idle_window(world: World, idle_for: float, still_frozen: bool) -> None:
    online = world.place("serve", AppClass.ONLINE)
    offline = world.place("train", AppClass.OFFLINE)
    world.run_gpu(online, 80)
    world.tick()
    world.run_gpu(online, 0)
    steps = round(idle_for / 0.1)
    for _ in range(steps):
        world.tick(0.1)
    assert world.frozen(offline) is still_frozen
    assert bool(world.events(REASON_RESUMED)) is not still_frozen


def test_bursty_online_traffic_keeps_offline_paused_between_close_bursts(world: World) -> None:
    online = world.place("serve", AppClass.ONLINE)
    offline = world.place("train", AppClass.OFFLINE)
    for _ in range(5):
        world.run_gpu(online, 70)
        world.tick(0.1)
        world.run_gpu(online, 0)
        for _ in range(10):  # 1 s gap, shorter than the 2 s window
            world.tick(0.1)
            assert world.frozen(offline)
    assert len(world.events(REASON_PAUSED)) == 1, "one pause for the whole burst train, not one per burst"


def test_pool_without_colocation_never_pauses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    world = World(tmp_path, policy=PoolPolicy(online_offline=False))
    online = world.place("serve", AppClass.ONLINE)
    offline = world.place("train", AppClass.OFFLINE)
    world.run_gpu(online, 100)
    world.tick()
    assert not world.frozen(offline)


def test_offline_resumes_at_once_when_the_online_pod_leaves(world: World) -> None:
    online = world.place("serve", AppClass.ONLINE)
    offline = world.place("train", AppClass.OFFLINE)
    world.run_gpu(online, 80)
    world.tick()
    assert world.frozen(offline)
    world.registry.unregister(online.record.key)
    world.tick()
    assert not world.frozen(offline)


@pytest.mark.parametrize(
    "version, driver",
    [(CgroupVersion.V2, CgroupDriver.SYSTEMD), (CgroupVersion.V2, CgroupDriver.CGROUPFS), (CgroupVersion.V1, CgroupDriver.CGROUPFS), (CgroupVersion.V1, CgroupDriver.SYSTEMD)],
)
def test_pausing_works_on_every_cgroup_layout(tmp_path, version: CgroupVersion, driver: CgroupDriver) -> None:  # type: ignore[no-untyped-def]
    world = World(tmp_path, version=version, driver=driver, policy=PoolPolicy(online_offline=True, offline_resume_idle_s=0.5))
    online = world.place("serve", AppClass.ONLINE)
    offline = world.place("train", AppClass.OFFLINE)
    world.run_gpu(online, 50)
    world.tick()
    assert world.frozen(offline)
    world.run_gpu(online, 0)
    for _ in range(6):
        world.tick()
    assert not world.frozen(offline)


# --- the pure controller, as a state machine ------------------------------------------------------
GPUS = ["GPU-a", "GPU-b"]
IDLE_S = 1.0


def _record(n: int, app: AppClass, gpus: list[str]) -> RegisteredContainer:
    shares = tuple(GpuShare(i, g, 30, 1024) for i, g in enumerate(gpus))
    policy = PoolPolicy(online_offline=True, offline_resume_idle_s=IDLE_S)
    return RegisteredContainer(PodUid(f"pod-{n}"), "ns", f"p{n}", ContainerName("c"), shares, app, policy)


class ColocationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ctl = ColocationController()
        self.containers: dict[ContainerKey, RegisteredContainer] = {}
        self.now = 0.0
        self.last_active: dict[str, float] = {}  # model: GPU -> last time a registered online container was active
        self.waking_now: set[str] = set()  # model: GPUs with an online container waking (CPU) at this step
        self.counter = 0

    @rule(app=st.sampled_from([AppClass.ONLINE, AppClass.OFFLINE]), gpus=st.sets(st.sampled_from(GPUS), min_size=1))
    def add(self, app: AppClass, gpus: set[str]) -> None:
        self.counter += 1
        c = _record(self.counter, app, sorted(gpus))
        self.containers[c.key] = c
        self._step({})

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        if self.containers:
            key = data.draw(st.sampled_from(sorted(self.containers, key=str)))
            del self.containers[key]
            # activity belongs to online containers: a GPU left without any has no recent activity
            for uuid in list(self.last_active):
                if not any(o.app_class is AppClass.ONLINE and uuid in o.gpu_uuids for o in self.containers.values()):
                    del self.last_active[uuid]
        self._step({})

    def _some_online(self, data: st.DataObject) -> RegisteredContainer | None:
        online = sorted((c for c in self.containers.values() if c.app_class is AppClass.ONLINE), key=lambda x: str(x.key))
        return data.draw(st.sampled_from(online)) if online else None

    @rule(data=st.data(), dt=st.floats(0.01, 1.5))
    def online_active(self, data: st.DataObject, dt: float) -> None:
        """NVML saw an online container active on one of its GPUs."""
        self.now += dt
        c = self._some_online(data)
        self._step({data.draw(st.sampled_from(list(c.gpu_uuids))): [c.key]} if c else {})

    @rule(data=st.data(), dt=st.floats(0.01, 1.5))
    def online_waking(self, data: st.DataObject, dt: float) -> None:
        """An online container's CPU woke; NVML has not seen it yet."""
        self.now += dt
        c = self._some_online(data)
        self._step({}, {uuid: [c.key] for uuid in c.gpu_uuids} if c else {})

    @rule(dt=st.floats(0.01, 1.5))
    def idle(self, dt: float) -> None:
        self.now += dt
        self._step({})

    @rule(data=st.data())
    def policy_off(self, data: st.DataObject) -> None:
        offline = [c for c in self.containers.values() if c.app_class is AppClass.OFFLINE]
        if offline:
            c = data.draw(st.sampled_from(sorted(offline, key=lambda x: str(x.key))))
            self.containers[c.key] = replace(c, policy=PoolPolicy(online_offline=False))
        self._step({})

    def _step(self, active: dict[str, list[ContainerKey]], waking: dict[str, list[ContainerKey]] | None = None) -> None:
        for uuid in active:
            self.last_active[uuid] = self.now
        self.waking_now = set(waking or {})
        self.ctl.step(self.now, list(self.containers.values()), active, waking)

    def _recent_online(self, c: RegisteredContainer) -> bool:
        for uuid in c.gpu_uuids:
            has_online = any(o.app_class is AppClass.ONLINE and uuid in o.gpu_uuids for o in self.containers.values())
            if has_online and uuid in self.waking_now:
                return True  # a wake holds offline work for the step it is reported in, no longer
            last = self.last_active.get(uuid)
            if has_online and last is not None and self.now - last < IDLE_S + 1e-9:
                return True
        return False

    @invariant()
    def never_frozen_without_recent_online_work(self) -> None:
        for key in self.ctl.frozen:
            c = self.containers.get(key)
            assert c is not None, "a container that left is still frozen"
            assert c.app_class is AppClass.OFFLINE and c.policy.online_offline
            assert self._recent_online(c), f"{key} frozen though no online work on its GPUs was active within {IDLE_S}s"

    @invariant()
    def offline_next_to_active_online_is_frozen(self) -> None:
        for c in self.containers.values():
            if c.app_class is AppClass.OFFLINE and c.policy.online_offline:
                if any(u in self.waking_now for u in c.gpu_uuids):
                    assert c.key in self.ctl.frozen, "an online container waking on its GPU must pause it at once"
                if any(self.last_active.get(u) == self.now and any(o.app_class is AppClass.ONLINE and u in o.gpu_uuids for o in self.containers.values()) for u in c.gpu_uuids):
                    assert c.key in self.ctl.frozen


TestColocationMachine = ColocationMachine.TestCase
TestColocationMachine.settings = hsettings(max_examples=60, stateful_step_count=30, deadline=None)
