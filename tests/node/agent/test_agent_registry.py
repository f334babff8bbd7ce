"""The container registry survives restarts, is shared between processes, and rebuilds from pods."""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from tessera.model.contract import ANNOTATION_APP_CLASS, Allocation, GpuShare
from tessera_node.registry import AppClass, ContainerKey, ContainerName, ContainerRegistry, PodUid, RegisteredContainer, RegistryCorrupt, containers_from_pods, reconcile_with_pods
from tessera.model.pool_policy import PoolPolicy

SHARE = GpuShare(0, "GPU-0", 40, 5120)


def _record(uid: str, container: str = "main", app: AppClass | None = None) -> RegisteredContainer:
    return RegisteredContainer(PodUid(uid), "ns", f"pod-{uid}", ContainerName(container), (SHARE,), app, PoolPolicy(sharing="fixed-share"))


def test_records_survive_a_restart_of_the_agent(tmp_path: Path) -> None:
    first = ContainerRegistry(tmp_path)
    first.register(_record("u1", app=AppClass.OFFLINE))
    first.register(_record("u2"))
    first.set_container_id(ContainerKey(PodUid("u1"), ContainerName("main")), "abc")
    first.unregister(ContainerKey(PodUid("u2"), ContainerName("main")))

    again = ContainerRegistry(tmp_path)
    (record,) = again.all()
    assert record.pod_uid == "u1" and record.container_id == "abc" and record.app_class is AppClass.OFFLINE
    assert record.policy.sharing == "fixed-share" and record.shares == (SHARE,)


def test_a_registry_written_by_an_earlier_agent_keeps_its_policies(tmp_path: Path) -> None:
    """Agents before the shared pool policy record stored it under `sharing`, with every field."""
    record = _record("u1").to_json()
    record["policy"] = {"sharing": "burst-share", "memoryEnforcement": "warn", "onlineOffline": True, "offlineResumeIdleSeconds": 5.0}
    (tmp_path / "registry.json").write_text(json.dumps({"v": 1, "containers": [record]}))
    (again,) = ContainerRegistry(tmp_path).all()
    assert again.policy == PoolPolicy(sharing="burst-share", memory_enforcement="warn", online_offline=True, offline_resume_idle_s=5.0)


def _register_many(state_dir: str, prefix: str) -> None:
    registry = ContainerRegistry(Path(state_dir))
    for i in range(20):
        registry.register(_record(f"{prefix}{i}"))


def test_concurrent_writers_in_two_processes_lose_no_record(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_register_many, args=(str(tmp_path), p)) for p in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert len(ContainerRegistry(tmp_path).all()) == 40


def test_a_reader_sees_another_process_write(tmp_path: Path) -> None:
    reader = ContainerRegistry(tmp_path)
    assert reader.all() == []
    ContainerRegistry(tmp_path).register(_record("u9"))
    assert [r.pod_uid for r in reader.all()] == ["u9"]


def test_corrupt_registry_tells_the_user_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "registry.json").write_text("{not json")
    with pytest.raises(RegistryCorrupt, match="delete it and restart the agent"):
        ContainerRegistry(tmp_path).all()


def _pod(uid: str, node: str, phase: str = "Running", app: str | None = "offline") -> dict:  # type: ignore[type-arg]
    allocation = Allocation(node=node, assumed_at="t", containers={"main": (SHARE,), "sidecar": ()})
    annotations = allocation.pod_annotations()
    if app:
        annotations[ANNOTATION_APP_CLASS] = app
    return {
        "metadata": {"name": f"pod-{uid}", "namespace": "ns", "uid": uid, "annotations": annotations},
        "status": {"phase": phase, "containerStatuses": [{"name": "main", "containerID": "containerd://cid-" + uid}]},
    }


def test_rebuild_from_pods_keeps_only_this_nodes_running_allocations() -> None:
    pods = [_pod("a", "n1"), _pod("b", "n2"), _pod("c", "n1", phase="Succeeded"), {"metadata": {"uid": "d"}}]
    records = containers_from_pods(pods, "n1", PoolPolicy())
    assert [(r.pod_uid, r.container, r.container_id, r.app_class) for r in records] == [("a", "main", "cid-a", AppClass.OFFLINE)]


def test_reconcile_drops_a_vanished_pod_only_after_two_listings() -> None:
    existing = {r.key: r for r in [_record("gone")]}
    merged, missing = reconcile_with_pods(existing, [], set())
    assert set(merged) == set(existing) and missing == {"gone"}
    merged, missing = reconcile_with_pods(merged, [], missing)
    assert merged == {} and missing == set()
