"""Restarts, GPU health and MIG pauses, through the real sockets."""
from __future__ import annotations

import json
import shutil
import time

import pytest
from dp_harness import NODE, Harness, wait_until

from tessera.model.contract import ANNOTATION_NODE_GPUS, GPU_CORE, GPU_MEMORY, LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY, PAUSED_FOR_MIG_CHANGE
from tessera_node.registry import RegisteredContainer
from tessera_node.gpu.backend import MigMode

REREGISTER_TARGET_S = 1.0  # the product requirement: back within a second of a kubelet restart


def _node_gpus(h: Harness) -> list[dict[str, object]]:
    node = h.kube.get_node(NODE)
    gpus: list[dict[str, object]] = json.loads(node["metadata"]["annotations"][ANNOTATION_NODE_GPUS])
    return gpus


def _health_of_gpu(h: Harness, gpu: int) -> set[str]:
    return {health for dev, health in h.kubelet.devices(GPU_CORE).items() if dev.startswith(f"gpu{gpu}-")}


def test_kubelet_restart_is_answered_by_a_new_registration_within_a_second(node: Harness) -> None:
    for attempt in range(3):
        before = len(node.kubelet.registrations)
        node.kubelet.restart()
        assert node.kubelet.wait_for(lambda: len(node.kubelet.registrations) > before, REREGISTER_TARGET_S), f"no re-registration after restart {attempt + 1}"
        assert node.kubelet.wait_for(lambda: len(node.kubelet.devices(GPU_CORE)) == 400)
    # and the re-registered plugin serves: a pod bound after the restarts starts normally
    node.extender.create_and_bind("after-restart", {"main": (40, 2048)})
    node.allocate("after-restart")
    assert node.start("after-restart").env["TESSERA_GPU_CORE"] == "40"


def test_plugin_restart_loses_and_duplicates_no_allocation(node: Harness) -> None:
    pods = [f"p{i}" for i in range(6)]
    for pod in pods:
        node.extender.create_and_bind(pod, {"main": (30, 4096)})
        node.allocate(pod)
    for pod in pods[:3]:
        node.start(pod)
    # the plugin dies, and with it the registry on disk (e.g. a new node-local state dir)
    node.stop_plugin()
    shutil.rmtree(node.settings.state_dir)
    node.start_plugin()
    for pod in pods[3:]:
        node.start(pod)
    assert wait_until(lambda: len(node.registry.all()) == 6)
    records = node.registry.all()
    assert sorted(r.pod_name for r in records) == pods, "each container registered exactly once"
    per_gpu: dict[int, int] = {}
    for r in records:
        for s in r.shares:
            per_gpu[s.index] = per_gpu.get(s.index, 0) + s.core
    assert all(total <= 100 for total in per_gpu.values()), f"a GPU is over-committed: {per_gpu}"
    for pod in pods:
        view = node.kubelet.view("default", pod, "main")
        assert view is not None and view.env["TESSERA_GPU_CORE"] == "30"


def test_reconcile_forgets_containers_kubelet_no_longer_runs(node: Harness) -> None:
    node.extender.create_and_bind("short", {"main": (20, 1024)})
    node.allocate("short")
    node.start("short")
    assert wait_until(lambda: [r.pod_name for r in node.registry.all()] == ["short"])
    node.kubelet.remove_pod("default", "short")
    assert wait_until(lambda: node.registry.all() == []), "stale registry record was not dropped"


def test_critical_xid_marks_gpu_unhealthy_until_it_recovers(node: Harness) -> None:
    node.backend.inject_xid(0, 13)  # application error: the GPU stays in service
    node.backend.set_responsive(1, False)
    node.backend.inject_xid(1, 79)  # fallen off the bus
    assert node.kubelet.wait_for(lambda: _health_of_gpu(node, 1) == {"Unhealthy"})
    assert _health_of_gpu(node, 0) == {"Healthy"}
    assert wait_until(lambda: [g["healthy"] for g in _node_gpus(node)] == [True, False, True, True])
    assert wait_until(lambda: node.kube.get_node(NODE)["status"]["capacity"][GPU_MEMORY] == str(3 * 81559))
    # the scheduler's view: new pods are not placed on the unhealthy GPU by kubelet either
    assert sum(1 for h in node.kubelet.devices(GPU_CORE).values() if h == "Healthy") == 300
    node.backend.set_responsive(1, True)  # reset by the operator; no more Xids
    assert node.kubelet.wait_for(lambda: _health_of_gpu(node, 1) == {"Healthy"}, 3.0)
    assert wait_until(lambda: all(g["healthy"] for g in _node_gpus(node)))
    assert wait_until(lambda: node.kube.get_node(NODE)["status"]["capacity"][GPU_MEMORY] == str(4 * 81559))


def test_paused_for_mig_change_steps_aside_and_comes_back(node: Harness) -> None:
    socket = node.settings.device_plugin_dir / node.settings.endpoint
    registrations = len(node.kubelet.registrations)
    opened = node.backend.open_count
    node.kube.patch_node_labels(NODE, {LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY: PAUSED_FOR_MIG_CHANGE})
    assert node.kubelet.wait_for(lambda: not node.kubelet.connected(GPU_CORE), 3.0), "ListAndWatch still open while paused"
    assert wait_until(lambda: not socket.exists())
    assert wait_until(lambda: not node.backend.is_open), "GPU handles still held during the MIG change"
    assert wait_until(lambda: not any(g["healthy"] for g in _node_gpus(node))), "scheduler still sees usable GPUs during the MIG change"
    time.sleep(0.2)  # several supervisor ticks: a paused plugin must not re-register by itself
    assert len(node.kubelet.registrations) == registrations
    node.backend.set_mig_mode(2, MigMode.ENABLED)  # the MIG manager turned GPU 2 into slices
    node.kube.patch_node_labels(NODE, {LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY: None})
    assert node.kubelet.wait_for(lambda: len(node.kubelet.registrations) > registrations and node.kubelet.connected(GPU_CORE), 3.0)
    assert node.backend.open_count == opened + 1
    # GPU 2 now belongs to NVIDIA's plugin as MIG slices: no longer shared by Tessera
    assert node.kubelet.wait_for(lambda: {d.split("-")[0] for d in node.kubelet.devices(GPU_CORE)} == {"gpu0", "gpu1", "gpu3"}, 3.0)
    assert wait_until(lambda: [(g["index"], g["healthy"]) for g in _node_gpus(node)] == [(0, True), (1, True), (3, True)])
    # each GPU's SM count rides along: the extender rounds MPS percentages to whole TPCs with it
    assert [g["smCount"] for g in _node_gpus(node)] == [132, 132, 132]


def test_records_lost_before_their_write_are_restored_once_by_reconcile(node: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer holds records back until starts pause; a crash in that window loses them.
    Reconciliation restores each exactly once, with the shares PreStartContainer verified."""
    assert node.plugin is not None
    lost: list[RegisteredContainer] = []
    monkeypatch.setattr(node.plugin._writer, "submit", lost.append)  # queued, then the crash: never written
    pods = [f"q{i}" for i in range(4)]
    for pod in pods:
        node.extender.create_and_bind(pod, {"main": (20, 2048)})
        node.allocate(pod)
        node.start(pod)
    assert sorted(r.pod_name for r in lost) == pods
    assert wait_until(lambda: len(node.registry.all()) == 4)
    time.sleep(2 * node.settings.reconcile_s)  # later passes must not duplicate or change them
    assert sorted((r.pod_name, r.shares) for r in node.registry.all()) == sorted((r.pod_name, r.shares) for r in lost)


def test_a_pod_recreated_under_the_same_name_replaces_the_old_record(node: Harness) -> None:
    """StatefulSet pods come back with the same name and a new uid: the old pod's record (its
    shares, its limits) must not linger next to the new one."""
    first = node.extender.create_and_bind("web-0", {"main": (30, 4096)})
    node.allocate("web-0")
    node.start("web-0")
    old_uid = node.kube.get_pod("default", "web-0")["metadata"]["uid"]
    node.kubelet.remove_pod("default", "web-0")
    node.kube.delete_pod("default", "web-0")
    node.extender.release(first)
    node.extender.create_and_bind("web-0", {"main": (50, 8192)})
    new_uid = node.kube.get_pod("default", "web-0")["metadata"]["uid"]
    assert new_uid != old_uid, "test setup: the recreated pod must get a new uid"
    node.allocate("web-0")
    node.start("web-0")
    assert wait_until(lambda: [(r.pod_uid, r.shares[0].core, r.shares[0].memory_mib) for r in node.registry.all()] == [(new_uid, 50, 8192)]), (
        f"registry still holds the old pod: {node.registry.all()}"
    )
