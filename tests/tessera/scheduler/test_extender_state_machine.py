"""Hypothesis drives the extender over HTTP through pods arriving, binding, retrying, failing to
bind, finishing, being deleted and extender restarts; after every step the API server's records
must be safe and the cache must agree with them."""
from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from audit import audit
from extender_harness import GIB, Harness, node_manifest, pod_manifest, wait_until
from test_extender_bind_safety import FlakyBindApi

from tessera.alloc import PlacementPolicy
from tessera.model.contract import ANNOTATION_ALLOCATION
from tessera.scheduler.service import ExtenderService

GPU_MEMORY = 16 * GIB


class ExtenderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.api = FlakyBindApi()
        self.harness = Harness(self.api, policy=PlacementPolicy.FRAGMENTATION_AWARE)
        self.api.create_node(node_manifest("n1", gpus=2, memory_mib=GPU_MEMORY))
        self.api.create_node(node_manifest("n2", gpus=1, memory_mib=GPU_MEMORY, placement="spread"))
        self.service: ExtenderService = self.harness.start()
        self.scheduler = self.harness.scheduler(self.service)
        self.count = 0
        self.live: list[str] = []

    def teardown(self) -> None:
        self.harness.close()

    @rule(core=st.sampled_from([5, 25, 40, 50, 75, 100, 200]), memory=st.sampled_from([None, 1024, 8192]), fail_bind=st.booleans())
    def arrive(self, core: int, memory: int | None, fail_bind: bool) -> None:
        name = f"p{self.count}"
        self.count += 1
        self.api.create_pod(pod_manifest(name, ("main", core, memory)))
        self.live.append(name)
        self.api.fail_binds = 1 if fail_bind else 0
        self.scheduler.schedule("default", name)
        self.api.fail_binds = 0

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
        self.service.stop()
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


ExtenderMachine.TestCase.settings = settings(
    max_examples=12, stateful_step_count=14, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestExtenderMachine = ExtenderMachine.TestCase
