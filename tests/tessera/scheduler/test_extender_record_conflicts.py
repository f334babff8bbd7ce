"""Records that cannot all be true at once (more than 100 % of a GPU, a GPU the node does not
report, a record that does not parse) are never dropped: every one is counted where it can be, so
nothing more lands there, and each is reported (metric, Warning Event on the pod, log)."""
from __future__ import annotations

import json

import pytest
from extender_harness import GIB, Harness, node_manifest, pod_manifest, wait_until

from tessera.kube.api import KubeObject
from tessera.model.contract import ANNOTATION_ALLOCATION, Allocation, GpuShare

GPU_MEMORY = 16 * GIB


def _running(harness: Harness, name: str, node: str, gpu: int, core: int, memory_mib: int | None = None, *, record: str | None = None) -> KubeObject:
    """A pod some earlier extender bound with this record (written straight into the API server)."""
    allocation = Allocation(node, "2026-11-28T00:00:00.000000Z", {"main": (GpuShare(gpu, f"GPU-{node}-{gpu}", core, memory_mib or 0),)})
    pod = harness.api.create_pod(pod_manifest(name, ("main", core, memory_mib)))
    annotations = dict(allocation.pod_annotations())
    if record is not None:
        annotations[ANNOTATION_ALLOCATION] = record
    harness.api.patch_pod_annotations("default", name, annotations)
    harness.api.bind_pod("default", name, pod["metadata"]["uid"], node)
    return harness.api.get_pod("default", name)


def _conflicts(harness: Harness, service_index: int = -1) -> dict[str, float]:
    text = harness.client(harness.services[service_index]).get("/metrics")[1]
    out = {}
    for line in text.splitlines():
        if line.startswith("tessera_extender_record_conflicts{"):
            reason = line.split('reason="')[1].split('"')[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def test_conflicting_records_are_all_counted_and_reported(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1, memory_mib=GPU_MEMORY))
    _running(harness, "a", "n1", 0, 60)
    _running(harness, "b", "n1", 0, 60)  # 120 % of GPU 0: a fault let both through once
    service = harness.start()  # a restart must not forget either: both may be running
    assert service.state.counted_usage() == {("n1", 0): (1200, 0)}
    assert _conflicts(harness) == {"overcommit": 2.0, "unknown_gpu": 0.0, "unreadable": 0.0}
    assert "in conflict (overcommit)" in caplog.text
    service.sync.sweep()  # the leader posts the Events
    events = [e for e in harness.api.list_events() if e["reason"] == "AllocationConflict"]
    assert sorted(e["involvedObject"]["name"] for e in events) == ["a", "b"]
    assert all(e["type"] == "Warning" and "overcommit" in e["message"] for e in events)
    # nothing more lands on that GPU, not even 1 %
    harness.api.create_pod(pod_manifest("c", ("main", 1, None)))
    assert harness.scheduler(service).schedule("default", "c").node is None
    # once one of them ends, the other fits again and the conflict is over
    harness.api.delete_pod("default", "b")
    assert wait_until(lambda: service.state.counted_usage() == {("n1", 0): (600, 0)})
    assert _conflicts(harness)["overcommit"] == 0.0
    assert harness.scheduler(service).schedule("default", "c").node == "n1"


def test_a_record_naming_a_gpu_the_node_lacks_is_kept_and_reported(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1, memory_mib=GPU_MEMORY))
    _running(harness, "ghost", "n1", 3, 50)
    service = harness.start()
    assert _conflicts(harness)["unknown_gpu"] == 1.0
    assert service.state.summary()[1] == 1  # the pod is still tracked
    # the node reports its other GPUs again (a driver reload): the record counts once more
    harness.api.delete_node("n1")
    harness.api.create_node(node_manifest("n1", gpus=4, memory_mib=GPU_MEMORY))
    assert wait_until(lambda: service.state.counted_usage() == {("n1", 3): (500, 0)})
    assert _conflicts(harness)["unknown_gpu"] == 0.0


def test_an_unreadable_record_is_reported_and_its_pod_keeps_what_it_held(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1, memory_mib=GPU_MEMORY))
    _running(harness, "p", "n1", 0, 70)
    service = harness.start()
    assert service.state.counted_usage() == {("n1", 0): (700, 0)}
    harness.api.patch_pod_annotations("default", "p", {ANNOTATION_ALLOCATION: "{not json"})
    assert wait_until(lambda: _conflicts(harness)["unreadable"] == 1.0)
    assert service.state.counted_usage() == {("n1", 0): (700, 0)}  # which GPU it uses is unknown now: keep it
    harness.api.create_pod(pod_manifest("q", ("main", 40, None)))
    assert harness.scheduler(service).schedule("default", "q").node is None


def test_a_node_that_leaves_and_returns_keeps_its_pods_counted(harness: Harness) -> None:
    """A node relabelled out of the shared pool and back (or deleted and re-registered) comes back
    with the records of the pods still on it, not empty."""
    harness.api.create_node(node_manifest("n1", gpus=1, memory_mib=GPU_MEMORY))
    service = harness.start()
    harness.api.create_pod(pod_manifest("p", ("main", 100, None)))
    assert harness.scheduler(service).schedule("default", "p").node == "n1"
    node = harness.api.get_node("n1")
    harness.api.patch_node_labels("n1", {"tessera.dev/pool-kind": "nvidia"})
    assert wait_until(lambda: service.state.summary()[0] == 0)
    harness.api.patch_node_labels("n1", {"tessera.dev/pool-kind": "shared"})
    assert wait_until(lambda: service.state.summary()[0] == 1)
    assert service.state.counted_usage() == {("n1", 0): (1000, GPU_MEMORY)}  # a whole GPU, all its memory
    harness.api.create_pod(pod_manifest("q", ("main", 10, None)))
    assert harness.scheduler(service).schedule("default", "q").node is None
    assert json.loads(node["metadata"]["annotations"]["tessera.dev/gpus"])  # the inventory was there all along
