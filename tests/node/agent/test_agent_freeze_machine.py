"""The whole agent (registry, attribution, controllers, freezer files) as a state machine: it never
leaves an offline container frozen unless online work on its GPU was active within the resume
window, and it always pauses offline work next to active online work."""
from __future__ import annotations

import tempfile
from pathlib import Path

from agent_world import Placed, World
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tessera_node.registry import AppClass
from tessera.model.pool_policy import PoolPolicy

IDLE_S = 0.5
TICK_S = 0.1


class AgentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory()
        self.world = World(Path(self._tmp.name), policy=PoolPolicy(online_offline=True, offline_resume_idle_s=IDLE_S), with_kube=False)
        self.placed: list[Placed] = []
        self.removed: list[Placed] = []
        self.busy: dict[int, int] = {}  # pid -> sm %
        self.last_active: dict[int, float] = {}  # GPU index -> agent clock when online work was last active

    def teardown(self) -> None:
        self._tmp.cleanup()

    @rule(app=st.sampled_from([AppClass.ONLINE, AppClass.OFFLINE]), gpu=st.integers(0, 1))
    def place(self, app: AppClass, gpu: int) -> None:
        p = self.world.place(f"p{len(self.placed)}", app, gpu=gpu, core=10, memory_mib=0)
        self.placed.append(p)
        self.world.run_gpu(p, 0 if app is AppClass.ONLINE else 80)
        self._tick()

    @precondition(lambda self: bool(self.placed))
    @rule(data=st.data(), sm=st.sampled_from([0, 0, 3, 50, 90]))
    def online_load(self, data: st.DataObject, sm: int) -> None:
        online = [p for p in self.placed if p.record.app_class is AppClass.ONLINE]
        if online:
            p = data.draw(st.sampled_from(online))
            self.world.run_gpu(p, sm)
            self.busy[p.pids[0]] = sm
        self._tick()

    @precondition(lambda self: bool(self.placed))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from(self.placed))
        self.placed.remove(p)
        self.removed.append(p)
        self.world.registry.unregister(p.record.key)
        for pid in p.pids:
            self.world.sim.remove_process(pid)
            self.busy.pop(pid, None)
        gpu = p.record.shares[0].index
        if not any(q.record.app_class is AppClass.ONLINE and q.record.shares[0].index == gpu for q in self.placed):
            self.last_active.pop(gpu, None)  # activity belonged to online containers that are gone
        self._tick()

    @rule(ticks=st.integers(1, 8))
    def wait(self, ticks: int) -> None:
        for _ in range(ticks):
            self._tick()

    def _tick(self) -> None:
        self.world.tick(TICK_S)
        now = self.world.clock.now
        for p in self.placed:
            if p.record.app_class is AppClass.ONLINE and self.busy.get(p.pids[0], 0) >= self.world.settings.activity_threshold_pct:
                self.last_active[p.record.shares[0].index] = now

    def _online_recent(self, gpu: int) -> bool:
        has_online = any(p.record.app_class is AppClass.ONLINE and p.record.shares[0].index == gpu for p in self.placed)
        last = self.last_active.get(gpu)
        return has_online and last is not None and self.world.clock.now - last < IDLE_S + 1e-6

    @invariant()
    def frozen_only_with_recent_online_work(self) -> None:
        for p in self.placed:
            if self.world.frozen(p):
                assert p.record.app_class is AppClass.OFFLINE
                assert self._online_recent(p.record.shares[0].index), f"{p.record.pod_name} frozen without recent online work"

    @invariant()
    def offline_next_to_active_online_is_frozen(self) -> None:
        now = self.world.clock.now
        for p in self.placed:
            gpu = p.record.shares[0].index
            if p.record.app_class is AppClass.OFFLINE and self.last_active.get(gpu) == now and self._online_recent(gpu):
                assert self.world.frozen(p)

    @invariant()
    def removed_containers_are_not_frozen(self) -> None:
        live = {p.record.key for p in self.placed}
        assert set(self.world.agent.pauses.paused) <= live
        assert not any(self.world.frozen(p) for p in self.removed), "a container that left was left frozen"


TestAgentMachine = AgentMachine.TestCase
TestAgentMachine.settings = hsettings(max_examples=25, stateful_step_count=25, deadline=None)
