"""Hypothesis drives the extender through pods arriving, binding, retrying, API faults at any step
of a bind or of the TTL's strip (refused, applied then failed, dropped before or after applying,
applied after the client gave up), TTL sweeps, pods finishing or being deleted, and extender
crashes and restarts. The extender reaches the API only through the loopback server and the real
client. After every step the API server's records must be safe and the cache must count exactly
what they hold."""
from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from audit import audit
from extender_harness import GIB, Harness, node_manifest, pod_manifest, wait_until
from json_api_stand_in import loopback_api
from test_extender_bind_safety import SteppedClock
from test_extender_write_faults import CLIENT_TIMEOUT_S, FAULTS, STEPS, recorded_usage, settle_faults

from tessera.kube.loopback_faults import Nth

from tessera.alloc import PlacementPolicy
from tessera.model.contract import ANNOTATION_ALLOCATION
from tessera.scheduler.service import ExtenderService

GPU_MEMORY = 16 * GIB


class ExtenderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self._serving = loopback_api(Path(self._dir.name))
        self.loopback = self._serving.__enter__()
        self.api = self.loopback.fake
        self.clock = SteppedClock(1_800_000_000.0)
        self.harness = Harness(
            self.api, policy=PlacementPolicy.FRAGMENTATION_AWARE, clock=self.clock, ttl_s=60,
            service_api=lambda: self.loopback.client(request_timeout_s=CLIENT_TIMEOUT_S),
        )
        self.api.create_node(node_manifest("n1", gpus=2, memory_mib=GPU_MEMORY))
        self.api.create_node(node_manifest("n2", gpus=1, memory_mib=GPU_MEMORY, placement="spread"))
        self.service: ExtenderService = self.harness.start()
        self.scheduler = self.harness.scheduler(self.service)
        self.count = 0
        self.live: list[str] = []

    def teardown(self) -> None:
        self.harness.close()
        self._serving.__exit__(None, None, None)
        self._dir.cleanup()

    @rule(
        core=st.sampled_from([5, 25, 40, 50, 75, 100, 200]),
        memory=st.sampled_from([None, 1024, 8192]),
        fault=st.none() | st.tuples(st.sampled_from(list(STEPS)), st.sampled_from(list(FAULTS))),
    )
    def arrive(self, core: int, memory: int | None, fault: tuple[str, str] | None) -> None:
        name = f"p{self.count}"
        self.count += 1
        self.api.create_pod(pod_manifest(name, ("main", core, memory)))
        self.live.append(name)
        faults = self.loopback.server.faults
        if fault is not None:
            step, kind = fault
            faults.add(FAULTS[kind], STEPS[step], Nth(1))
        self.scheduler.schedule("default", name)
        faults.clear()
        settle_faults(self.loopback)

    @rule(fault=st.none() | st.sampled_from(list(FAULTS)))
    def sweep(self, fault: str | None) -> None:
        """The TTL passes: the leader settles what is left assumed, maybe with a fault on its strip."""
        self.clock.now += 61
        faults = self.loopback.server.faults
        if fault is not None:
            faults.add(FAULTS[fault], STEPS["record the allocation"], Nth(1))  # the strip is a PATCH of the pod too
        self.service.sync.sweep()
        faults.clear()
        settle_faults(self.loopback)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def reschedule(self, data: st.DataObject) -> None:
        """kube-scheduler retries a pending pod, or re-sends the bind of a bound one."""
        name = data.draw(st.sampled_from(self.live))
        pod = self.api.get_pod("default", name)
        node = pod["spec"].get("nodeName")
        if node:
            assert self.scheduler.bind(pod, node) == ""
        else:
            self.scheduler.schedule("default", name)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), how=st.sampled_from(["delete", "Succeeded", "Failed"]))
    def leave(self, data: st.DataObject, how: str) -> None:
        name = data.draw(st.sampled_from(self.live))
        self.live.remove(name)
        if how == "delete":
            self.api.delete_pod("default", name)
        else:
            self.api.set_pod_phase("default", name, how)

    @rule()
    def restart(self) -> None:
        """The extender process dies (no cleanup) and a new one starts from the API server."""
        self.service.abandon()
        self.service = self.harness.start()
        self.scheduler = self.harness.scheduler(self.service)

    @invariant()
    def records_are_safe_and_cached(self) -> None:
        usage = audit(self.api, gpu_memory_mib=GPU_MEMORY)
        recorded = {
            p["metadata"]["uid"]
            for p in self.api.list_pods()
            if (p["metadata"].get("annotations") or {}).get(ANNOTATION_ALLOCATION) and p["metadata"]["name"] in self.live
        }
        assert wait_until(lambda: self.service.state.summary()[1] == len(recorded)), (self.service.state.summary(), recorded)
        assert round(self.service.state.summary()[3] * 100) == sum(usage.values())
        assert wait_until(lambda: self.service.state.counted_usage() == recorded_usage(self.api)), (self.service.state.counted_usage(), recorded_usage(self.api))


ExtenderMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestExtenderMachine = ExtenderMachine.TestCase
