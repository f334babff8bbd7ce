"""Pods on a GPU that became unhealthy are evicted for rescheduling (MISSION S7), exactly those,
through the Eviction API so PodDisruptionBudgets hold.

End to end: real plugin on its unix socket, kubelet emulator, fake API server with budgets.
Then the pure victim selection, and the retry schedule against the fake API with a manual clock.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dp_harness import NODE, Harness, wait_until

from tessera.cli.main import build_parser
from tessera.model.contract import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_GPU_INDEX_PREFIX,
    GPU_CORE,
    LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY,
    LABEL_SHARING_POLICY,
    PAUSED_FOR_MIG_CHANGE,
    Allocation,
    GpuShare,
    NodeGpu,
)
from tessera.kube.fake import FakeKubeApi
from tessera_node.deviceplugin.eviction import EVENT_REASON, EvictionSettings, Evictor, victims


def _run(h: Harness, name: str) -> dict[str, Any]:
    pod = h.extender.create_and_bind(name, {"main": (60, 1024)})  # 60 %: two pods never share a GPU
    h.allocate(name)
    h.start(name)
    return pod


def _gpu(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"][ANNOTATION_GPU_INDEX_PREFIX + "main"])


def _alive(h: Harness) -> set[str]:
    return {p["metadata"]["name"] for p in h.kube.list_pods()}


def _events(h: Harness, pod: str) -> list[dict[str, Any]]:
    return [e for e in h.kube.list_events() if e["reason"] == EVENT_REASON and e["involvedObject"]["name"] == pod]


@pytest.fixture
def node() -> Iterator[Harness]:
    harness = Harness()
    harness.start_plugin()
    yield harness
    harness.close()


@pytest.mark.parametrize(("critical", "harmless"), [(48, 13), (79, 43), (94, 31)])
def test_a_critical_xid_evicts_exactly_the_pods_of_that_gpu(node: Harness, critical: int, harmless: int) -> None:
    kept, doomed = _run(node, "kept"), _run(node, "doomed")
    assert _gpu(kept) != _gpu(doomed)
    node.backend.inject_xid(_gpu(kept), harmless)  # an application's own fault: its GPU stays in service
    node.backend.inject_xid(_gpu(doomed), critical)
    assert wait_until(lambda: "doomed" not in _alive(node)), "the pod of the failed GPU was not evicted"
    assert _alive(node) == {"kept"}, "a pod of a healthy GPU was evicted"
    assert node.kube.evicted == [("default", "doomed")], "evicted through the Eviction API"
    assert wait_until(lambda: len(_events(node, "doomed")) == 1), "kubectl describe explains the eviction"
    [event] = _events(node, "doomed")
    uuid = node.backend.list_gpus()[_gpu(doomed)].uuid
    assert event["type"] == "Warning" and uuid in event["message"] and f"Xid {critical}" in event["message"]
    assert _events(node, "kept") == []


def test_a_disruption_budget_holds_the_pod_until_it_allows_the_eviction(node: Harness) -> None:
    node.kube.set_disruption_budget("default", "everything", {}, 0)
    pod = _run(node, "guarded")
    node.backend.inject_xid(_gpu(pod), 48)
    node.backend.set_responsive(_gpu(pod), False)  # stays unhealthy while the budget holds
    assert wait_until(lambda: node.kube.evictions_refused >= 3), "refused evictions are retried"
    assert "guarded" in _alive(node)
    [event] = _events(node, "guarded")  # posted before the first retry
    assert "PodDisruptionBudget" in event["message"]
    node.kube.set_disruption_budget("default", "everything", {}, 1)  # a replacement became ready
    assert wait_until(lambda: "guarded" not in _alive(node))
    assert wait_until(lambda: len(_events(node, "guarded")) == 2)
    assert "evicted" in _events(node, "guarded")[-1]["message"]


def test_a_gpu_that_recovers_first_keeps_its_pods(node: Harness) -> None:
    node.kube.set_disruption_budget("default", "everything", {}, 0)
    first, second = _run(node, "first"), _run(node, "second")
    node.backend.inject_xid(_gpu(first), 48)  # answers NVML: recovers after the quiet period
    assert wait_until(lambda: node.kube.evictions_refused >= 1)
    assert node.kubelet.wait_for(lambda: all(h == "Healthy" for h in node.kubelet.devices("tessera.dev/gpu-core").values()))
    node.kube.set_disruption_budget("default", "everything", {}, 1)
    node.backend.inject_xid(_gpu(second), 48)
    node.backend.set_responsive(_gpu(second), False)
    assert wait_until(lambda: "second" not in _alive(node))
    assert "first" in _alive(node), "the eviction of a pod whose GPU recovered was not cancelled"


def test_gpus_read_afresh_after_a_mig_change_carry_no_pending_eviction(node: Harness) -> None:
    node.kube.set_disruption_budget("default", "everything", {}, 0)
    held, other = _run(node, "held"), _run(node, "other")
    node.backend.inject_xid(_gpu(held), 48)
    node.backend.set_responsive(_gpu(held), False)
    assert wait_until(lambda: node.kube.evictions_refused >= 1)
    node.kube.patch_node_labels(NODE, {LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY: PAUSED_FOR_MIG_CHANGE})
    assert node.kubelet.wait_for(lambda: not node.kubelet.connected(GPU_CORE), 3.0)
    node.backend.set_responsive(_gpu(held), True)  # the MIG manager reset the GPU meanwhile
    registrations = len(node.kubelet.registrations)
    node.kube.patch_node_labels(NODE, {LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY: None})
    assert node.kubelet.wait_for(lambda: len(node.kubelet.registrations) > registrations and node.kubelet.connected(GPU_CORE), 3.0)
    node.kube.set_disruption_budget("default", "everything", {}, 1)
    node.backend.inject_xid(_gpu(other), 48)
    node.backend.set_responsive(_gpu(other), False)
    assert wait_until(lambda: "other" not in _alive(node))
    assert "held" in _alive(node), "an eviction from before the MIG change outlived it"


def test_eviction_can_be_turned_off() -> None:
    h = Harness(evict=False)
    try:
        plugin = h.start_plugin()
        pod = _run(h, "stays")
        h.backend.inject_xid(_gpu(pod), 48)
        h.backend.set_responsive(_gpu(pod), False)
        assert wait_until(lambda: '"healthy":false' in h.kube.get_node(NODE)["metadata"]["annotations"]["tessera.dev/gpus"])
        # a later supervisor round (it reads the node) has run the eviction step too
        h.kube.patch_node_labels(NODE, {LABEL_SHARING_POLICY: "best-effort"})
        assert wait_until(lambda: plugin.state.allocate_settings.sharing_policy == "best-effort")
        assert _alive(h) == {"stays"} and h.kube.evicted == []
    finally:
        h.close()


@pytest.mark.parametrize(("argv", "enabled"), [([], True), (["--evict-on-unhealthy"], True), (["--no-evict-on-unhealthy"], False)])
def test_evict_on_unhealthy_flag(argv: list[str], enabled: bool) -> None:
    assert build_parser().parse_args(["node", "device-plugin", *argv]).evict_on_unhealthy is enabled


# --- which pods are victims (pure) ----------------------------------------------------------------

GPU0 = NodeGpu(0, "GPU-aaaa", "T4", 15360, False)
GPU1_UUID = "GPU-bbbb"


def _pod(name: str, *, node: str = NODE, on: str = GPU0.uuid, record_node: str = NODE, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    shares = (GpuShare(0 if on == GPU0.uuid else 1, on, 30, 1024),)
    record = Allocation(record_node, "2026-01-01T00:00:00Z", {"main": shares}).to_json()
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": {ANNOTATION_ALLOCATION: record}, **meta},
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("pod", "victim"),
    [
        (_pod("on-it"), True),
        (_pod("pending", phase="Pending"), True),
        (_pod("other-gpu", on=GPU1_UUID), False),
        (_pod("other-node", node="elsewhere"), False),
        (_pod("stale-record", record_node="elsewhere"), False),
        (_pod("finished", phase="Succeeded"), False),
        (_pod("failed", phase="Failed"), False),
        (_pod("terminating", deletionTimestamp="2026-01-01T00:00:00Z"), False),
        ({"metadata": {"name": "no-record", "annotations": {}}, "spec": {"nodeName": NODE}}, False),
        ({"metadata": {"name": "bad-record", "annotations": {ANNOTATION_ALLOCATION: "{"}}, "spec": {"nodeName": NODE}}, False),
    ],
    ids=lambda v: v["metadata"]["name"] if isinstance(v, dict) else str(v),
)
def test_only_pods_whose_allocation_names_the_gpu_on_this_node_are_victims(pod: dict[str, Any], victim: bool) -> None:
    assert [v.name for v in victims([pod], NODE, GPU0)] == ([pod["metadata"]["name"]] if victim else [])


# --- retry schedule -------------------------------------------------------------------------------

def test_refused_evictions_back_off_exponentially_up_to_the_cap() -> None:
    kube = FakeKubeApi()
    kube.set_disruption_budget("ns", "all", {}, 0)
    kube.create_pod(_pod("held"))
    evictor = Evictor(EvictionSettings(retry_initial_s=5.0, retry_max_s=20.0), kube, NODE)
    evictor.gpu_unhealthy(GPU0, "Xid 48", now=0.0)
    attempts_at = []
    for tick in range(0, 80):
        before = kube.evictions_refused
        evictor.step(float(tick))
        if kube.evictions_refused > before:
            attempts_at.append(tick)
    assert attempts_at == [0, 5, 15, 35, 55, 75], "waits 5, 10, 20 (cap), 20, 20"
    kube.set_disruption_budget("ns", "all", {}, 1)
    evictor.step(95.0)
    assert [v.name for v in evictor.evicted] == ["held"] and kube.list_pods() == []
