"""The allocation model: request decoding, reserve/release bookkeeping, and hypothesis properties
(never over-commit compute or memory on any GPU; whole GPUs are exclusive; release restores)."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tessera.alloc import (
    Cluster,
    ContainerRequest,
    GpuState,
    InvalidRequest,
    NodeState,
    PlacementPolicy,
    PodRequest,
    PodUid,
    ReserveConflict,
    pod_request_from_k8s,
)
from tessera.model.contract import GPU_CORE, GPU_MEMORY


@pytest.mark.parametrize(
    ("core", "count", "milli"),
    [(1, 1, 10), (40, 1, 400), (99, 1, 990), (100, 1, 1000), (300, 3, 1000), (0, 0, 0)],
)
def test_gpu_core_maps_to_shares_and_whole_gpus(core: int, count: int, milli: int) -> None:
    c = ContainerRequest.from_core("main", core)
    assert (c.gpu_count, c.gpu_milli) == (count, milli)


@pytest.mark.parametrize(("core", "message"), [(150, "multiple of 100"), (-5, "negative")])
def test_bad_gpu_core_says_what_to_use(core: int, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        ContainerRequest.from_core("main", core)


def k8s_pod(containers: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations or {}}, "spec": {"containers": containers}}


def test_pod_request_from_k8s_reads_limits_per_container() -> None:
    pod = k8s_pod(
        [
            {"name": "a", "resources": {"limits": {GPU_CORE: "40", GPU_MEMORY: "5120", "cpu": "500m", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {GPU_CORE: "200", "cpu": "1"}}},
            {"name": "sidecar", "resources": {"requests": {"cpu": "100m"}}},
        ],
        {"tessera.dev/app-class": "offline"},
    )
    req = pod_request_from_k8s(pod)
    assert req.uid == "u1" and req.app_class == "offline" and req.cpu_milli == 1600 and req.memory_mib == 1024
    assert [(c.name, c.gpu_count, c.gpu_milli, c.gpu_memory_mib) for c in req.gpu_containers] == [("a", 1, 400, 5120), ("b", 2, 1000, None)]


@pytest.mark.parametrize(
    ("containers", "annotations", "message"),
    [
        ([{"name": "a", "resources": {"limits": {GPU_CORE: "150"}}}], {}, "multiple of 100"),
        ([{"name": "a", "resources": {"limits": {GPU_CORE: "2.5"}}}], {}, "whole number"),
        ([{"name": "a", "resources": {"limits": {GPU_CORE: "abc"}}}], {}, "quantity"),
        ([{"name": "a", "resources": {"limits": {GPU_CORE: "10"}}}], {"tessera.dev/app-class": "batch"}, "online"),
    ],
)
def test_pod_request_from_k8s_rejects_with_a_clear_message(containers: list[dict[str, Any]], annotations: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        pod_request_from_k8s(k8s_pod(containers, annotations))


def two_gpu_node(name: str = "n1") -> NodeState:
    return NodeState(name, [GpuState(i, f"{name}-{i}", "T4", 16000) for i in range(2)], 64000, 262144)


def share(uid: str, core: int, memory: int | None = None) -> PodRequest:
    return PodRequest(PodUid(uid), (ContainerRequest.from_core("main", core, memory),), 100, 100)


def test_reserve_rechecks_after_a_concurrent_change() -> None:
    cluster = Cluster([NodeState("n1", [GpuState(0, "u", "T4", 16000)], 64000, 262144)])
    a, b = share("a", 70), share("b", 70)
    plan_a = cluster.place(a, "n1")
    plan_b = cluster.place(b, "n1")
    assert plan_a is not None and plan_b is not None
    cluster.reserve(b, plan_b)
    with pytest.raises(ReserveConflict):
        cluster.reserve(a, plan_a)
    assert cluster.usage().allocated_milli == 700 and set(cluster.allocated()) == {"b"}


def test_reserve_is_idempotent_for_the_same_placement_and_refuses_another() -> None:
    cluster = Cluster([two_gpu_node()], policy=PlacementPolicy.SPREAD)
    a = share("a", 30)
    plan = cluster.place(a, "n1")
    assert plan is not None
    cluster.reserve(a, plan)
    cluster.reserve(a, plan)
    assert cluster.usage().allocated_milli == 300
    cluster.release(a.uid)
    assert cluster.usage().allocated_milli == 0


def test_restore_from_allocation_record_rebuilds_the_same_usage() -> None:
    cluster = Cluster([two_gpu_node()])
    a = PodRequest(PodUid("a"), (ContainerRequest.from_core("x", 30, 4000), ContainerRequest.from_core("y", 100)), 100, 100)
    plan = cluster.schedule(a)
    assert plan is not None
    cluster.reserve(a, plan)
    record = cluster.to_allocation(plan, "2026-11-22T00:00:00Z")
    fresh = Cluster([two_gpu_node()])
    fresh.restore(a, record)
    assert [(g.used_milli, g.used_memory_mib) for g in fresh.nodes["n1"].gpus] == [(g.used_milli, g.used_memory_mib) for g in cluster.nodes["n1"].gpus]
    with pytest.raises(ReserveConflict):
        fresh.restore(PodRequest(PodUid("b"), a.containers, 100, 100), record)


def test_replacing_a_node_inventory_keeps_its_pods() -> None:
    cluster = Cluster([two_gpu_node()])
    a = share("a", 60)
    plan = cluster.schedule(a)
    assert plan is not None
    cluster.reserve(a, plan)
    assert cluster.add_node(two_gpu_node()) == []
    assert cluster.usage().allocated_milli == 600
    assert cluster.remove_node("n1") == ["a"]


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, int | None, str | None]:
    core = draw(st.one_of(st.integers(1, 99), st.sampled_from([100, 200])))
    memory = draw(st.one_of(st.none(), st.integers(1, 16000)))
    app = draw(st.sampled_from([None, "online", "offline"]))
    return core, memory, app


class AllocationMachine(RuleBasedStateMachine):
    """Random arrivals, departures, health flips and stale reservations on a small cluster."""

    def __init__(self) -> None:
        super().__init__()
        nodes = [NodeState(f"n{i}", [GpuState(j, f"n{i}-{j}", "T4", 16000) for j in range(3)], 8000, 32768) for i in range(2)]
        self.cluster = Cluster(nodes)
        self.count = 0
        self.pods: dict[str, PodRequest] = {}
        self.stale: list[tuple[PodRequest, Any]] = []

    def _pod(self, req: tuple[int, int | None, str | None]) -> PodRequest:
        self.count += 1
        core, memory, app = req
        return PodRequest(PodUid(f"p{self.count}"), (ContainerRequest.from_core("c", core, memory),), 500, 1024, None, app)  # type: ignore[arg-type]

    @rule(req=requests(), policy=st.sampled_from(list(PlacementPolicy)))
    def arrive(self, req: tuple[int, int | None, str | None], policy: PlacementPolicy) -> None:
        pod = self._pod(req)
        self.cluster.observe(pod)
        placement = self.cluster.schedule(pod, policy)
        if placement is not None:
            self.cluster.reserve(pod, placement)
            self.pods[pod.uid] = pod

    @rule(req=requests(), node=st.sampled_from(["n0", "n1"]))
    def plan_now_reserve_later(self, req: tuple[int, int | None, str | None], node: str) -> None:
        pod = self._pod(req)
        placement = self.cluster.place(pod, node)
        if placement is not None:
            self.stale.append((pod, placement))

    @rule()
    def reserve_stale(self) -> None:
        if self.stale:
            pod, placement = self.stale.pop(0)
            try:
                self.cluster.reserve(pod, placement)
                self.pods[pod.uid] = pod
            except ReserveConflict:
                pass

    @rule(data=st.data())
    def depart(self, data: st.DataObject) -> None:
        if self.pods:
            uid = data.draw(st.sampled_from(sorted(self.pods)))
            assert self.cluster.release(PodUid(uid)) is not None
            del self.pods[uid]

    @rule(node=st.sampled_from(["n0", "n1"]), index=st.integers(0, 2), healthy=st.booleans())
    def flip_health(self, node: str, index: int, healthy: bool) -> None:
        self.cluster.set_gpu_health(node, index, healthy)

    @invariant()
    def never_over_committed_and_consistent(self) -> None:
        expected: dict[tuple[str, int], list[int]] = {}
        whole: set[tuple[str, int]] = set()
        for uid, placement in self.cluster.allocated().items():
            pod = self.pods[uid]
            for cp, c in zip(placement.containers, pod.gpu_containers):
                for g in cp.grants:
                    acc = expected.setdefault((placement.node, g.index), [0, 0, 0])
                    acc[0] += g.milli
                    acc[1] += g.memory_mib
                    acc[2] += 1
                    if c.whole:
                        whole.add((placement.node, g.index))
        for node in self.cluster.nodes.values():
            assert node.used_cpu_milli <= 8000 and node.used_memory_mib <= 32768
            for gpu in node.gpus:
                milli, memory, holders = expected.get((node.name, gpu.index), [0, 0, 0])
                assert (gpu.used_milli, gpu.used_memory_mib) == (milli, memory)
                assert 0 <= gpu.used_milli <= 1000 and 0 <= gpu.used_memory_mib <= gpu.memory_mib
                if (node.name, gpu.index) in whole:
                    assert holders == 1

    def teardown(self) -> None:
        for uid in list(self.pods):
            self.cluster.release(PodUid(uid))
        for node in self.cluster.nodes.values():
            assert node.used_cpu_milli == 0 and node.used_memory_mib == 0
            assert all(g.used_milli == 0 and g.used_memory_mib == 0 and g.offline_milli == 0 for g in node.gpus)


AllocationMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestAllocationMachine = AllocationMachine.TestCase
