"""GPU memory limits: warn pools post a Warning event, enforce pools kill the container's GPU work."""
from __future__ import annotations

from pathlib import Path

from agent_world import World

from tessera_node.agent.memory import REASON_MEMORY_EXCEEDED, REASON_MEMORY_WARNING
from tessera_node.registry import AppClass
from tessera.model.pool_policy import PoolPolicy


def test_warn_pool_posts_one_warning_per_episode_and_kills_nothing(tmp_path: Path) -> None:
    world = World(tmp_path, policy=PoolPolicy(memory_enforcement="warn"))
    job = world.place("job", None, memory_mib=4096, processes=2)
    world.run_gpu(job, 50, memory_mib=2500)  # 2 x 2500 = 5000 MiB > 4096
    for _ in range(5):
        world.tick()
    (event,) = world.events(REASON_MEMORY_WARNING)
    assert event["type"] == "Warning"
    assert event["involvedObject"] == {
        "apiVersion": "v1", "kind": "Pod", "namespace": "team-a", "name": "job",
        "uid": job.record.pod_uid, "fieldPath": "spec.containers{main}",
    }
    assert "5000 MiB" in event["message"] and "4096 MiB" in event["message"]
    assert world.killer.killed == []

    world.run_gpu(job, 50, memory_mib=1000)  # back under: the episode ends
    world.tick()
    world.run_gpu(job, 50, memory_mib=3000)
    world.tick()
    assert len(world.events(REASON_MEMORY_WARNING)) == 2


def test_enforce_pool_kills_only_the_offending_containers_gpu_processes(tmp_path: Path) -> None:
    world = World(tmp_path, policy=PoolPolicy(memory_enforcement="enforce"))
    hog = world.place("hog", None, memory_mib=4096, processes=2)
    neighbour = world.place("neighbour", None, memory_mib=4096)
    world.run_gpu(hog, 50, memory_mib=3000)
    world.run_gpu(neighbour, 50, memory_mib=4000)  # at its limit, not over
    world.tick()
    assert sorted(world.killer.killed) == sorted(hog.pids)
    (event,) = world.events(REASON_MEMORY_EXCEEDED)
    assert event["involvedObject"]["name"] == "hog"
    assert "killed its GPU processes" in event["message"]
    remaining = {p.pid for p in world.sim.processes()}
    assert remaining == set(neighbour.pids)


def test_container_without_memory_request_is_never_limited(tmp_path: Path) -> None:
    world = World(tmp_path, policy=PoolPolicy(memory_enforcement="enforce"))
    whole = world.place("whole", AppClass.OFFLINE, core=100, memory_mib=0)
    world.run_gpu(whole, 100, memory_mib=70000)
    world.tick()
    assert world.killer.killed == [] and world.events() == []


def test_processes_of_unregistered_pods_are_left_alone(tmp_path: Path) -> None:
    world = World(tmp_path, policy=PoolPolicy(memory_enforcement="enforce"))
    world.sim.add_process(4242, 0, 60000, 90)  # e.g. a system process outside kubepods
    world.tick()
    assert world.killer.killed == []
