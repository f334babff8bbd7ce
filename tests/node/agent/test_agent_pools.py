"""Where the agent learns the pool policy and the containers: pools file, node labels, pods
(the rule itself: tests/tessera/model/test_pool_policy.py)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from agent_world import NODE, World

from tessera.model.contract import LABEL_POOL
from tessera_node.agent.memory import REASON_MEMORY_EXCEEDED
from tessera_node.registry import AppClass, ContainerRegistry
from tessera.model.pool_policy import PoolPolicy

POOLS = {"a100-shared": {"policy": "fixed-share", "memoryEnforcement": "enforce", "onlineOffline": True, "offlineResumeIdleSeconds": 7}}


def test_agent_applies_the_pool_policy_from_the_pools_file(tmp_path: Path) -> None:
    pools_file = tmp_path / "pools.json"
    pools_file.write_text(json.dumps(POOLS))
    world = World(tmp_path, policy=PoolPolicy(memory_enforcement="warn"))  # records say warn; the pool says enforce
    world.settings = replace(world.settings, pools_file=pools_file)
    world.agent = world.new_agent()
    assert world.kube is not None
    world.kube.patch_node_labels(NODE, {LABEL_POOL: "a100-shared"})
    hog = world.place("hog", None, memory_mib=1024)
    world.agent.refresh_from_pods()
    world.run_gpu(hog, 10, memory_mib=2048)
    world.tick()
    assert world.killer.killed == hog.pids
    assert world.events(REASON_MEMORY_EXCEEDED)


def test_container_ids_are_learnt_from_pod_status(world: World) -> None:
    placed = world.place("train", AppClass.OFFLINE)
    world.registry.set_container_id(placed.record.key, None)
    world.agent.refresh_from_pods()
    record = world.registry.get(placed.record.key)
    assert record is not None and record.container_id == placed.record.container_id


def test_lost_state_dir_is_rebuilt_from_pods(world: World) -> None:
    world.place("serve", AppClass.ONLINE)
    world.place("train", AppClass.OFFLINE)
    world.registry.path.unlink()
    fresh = ContainerRegistry(world.root / "state")
    world.agent.deps.registry = fresh
    world.agent.start()
    assert sorted((r.pod_name, r.app_class) for r in fresh.all()) == [("serve", AppClass.ONLINE), ("train", AppClass.OFFLINE)]
