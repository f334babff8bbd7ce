"""Test harness: a small simulated node for agent tests: simulated GPUs, a fake cgroup + /proc tree, the
container registry, an in-memory API server and a manual clock."""
from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path

from tessera.model.contract import ANNOTATION_APP_CLASS, Allocation, GpuShare
from tessera.kube.fake import FakeKubeApi
from tessera_node.agent.cgroups import CgroupDriver, CgroupVersion
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.agent.loop import Agent, AgentDeps
from tessera_node.agent.mps import FakeProcessRunner, MpsSupervisor
from tessera_node.registry import AppClass, ContainerName, ContainerRegistry, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy
from tessera_node.agent.settings import AgentSettings
from tessera_node.agent.simscript import SimulatedKiller
from tessera_node.gpu.simulated import SimulatedBackend

NODE = "gpu-node-1"


@dataclass
class ManualClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Placed:
    record: RegisteredContainer
    cgroup: Path
    pids: list[int]


@dataclass
class World:
    root: Path
    version: CgroupVersion = CgroupVersion.V2
    driver: CgroupDriver = CgroupDriver.SYSTEMD
    policy: PoolPolicy = field(default_factory=PoolPolicy)
    gpus: str = "H100-80GB:2"
    with_kube: bool = True

    def __post_init__(self) -> None:
        self.tree = CgroupTreeBuilder(self.root, self.version, self.driver)
        self.sim = SimulatedBackend.from_spec(self.gpus, node_seed=NODE)
        self.sim.open()
        self.uuids = [g.uuid for g in self.sim.list_gpus()]
        self.registry = ContainerRegistry(self.root / "state")
        self.kube = FakeKubeApi() if self.with_kube else None
        if self.kube is not None:
            self.kube.create_node({"metadata": {"name": NODE, "labels": {}}})
        self.clock = ManualClock()
        self.wall = ManualClock(1_700_000_000.0)
        self.killer = SimulatedKiller(self.sim)
        self.runner = FakeProcessRunner()
        self.settings = AgentSettings(node_name=NODE, state_dir=self.root / "state", slow_every=1, pods_refresh_every=1_000_000)
        self._next_pid = 1000
        self.agent = self.new_agent()

    def new_agent(self) -> Agent:
        deps = AgentDeps(
            backend=self.sim, registry=self.registry, locator=self.tree.locator(), killer=self.killer,
            kube=self.kube, mps=MpsSupervisor(self.runner, self.root / "mps"), monotonic=self.clock, wall=self.wall,
        )
        agent = Agent(self.settings, deps)
        agent.node_policy = self.policy
        agent.set_gpus(self.sim.list_gpus())  # what start() would learn, without thawing anything
        return agent

    def place(
        self, name: str, app_class: AppClass | None, gpu: int = 0, core: int = 50, memory_mib: int = 4096, processes: int = 1, namespace: str = "team-a"
    ) -> Placed:
        pod_uid = str(uuidlib.uuid4())
        container_id = uuidlib.uuid4().hex + uuidlib.uuid4().hex
        pids = [self._pid() for _ in range(processes)]
        cgroup = self.tree.container(pod_uid, container_id, pids)
        share = GpuShare(gpu, self.uuids[gpu], core, memory_mib)
        record = RegisteredContainer(
            PodUid(pod_uid), namespace, name, ContainerName("main"), (share,), app_class, self.policy, container_id
        )
        self.registry.register(record)
        if self.kube is not None:
            allocation = Allocation(node=NODE, assumed_at="2026-01-01T00:00:00Z", containers={"main": (share,)})
            annotations = allocation.pod_annotations()
            if app_class is not None:
                annotations[ANNOTATION_APP_CLASS] = app_class.value
            self.kube.create_pod({
                "metadata": {"name": name, "namespace": namespace, "uid": pod_uid, "annotations": annotations},
                "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
                "status": {"phase": "Running", "containerStatuses": [{"name": "main", "containerID": f"containerd://{container_id}"}]},
            })
        return Placed(record, cgroup, pids)

    def _pid(self) -> int:
        self._next_pid += 1
        return self._next_pid

    def run_gpu(self, placed: Placed, sm_pct: int, memory_mib: int = 1024) -> None:
        gpu = placed.record.shares[0].index
        for pid in placed.pids:
            self.sim.add_process(pid, gpu, memory_mib, sm_pct)

    def tick(self, seconds: float = 0.1) -> None:
        self.clock.now += seconds
        self.wall.now += seconds
        self.agent.tick()
        self.tree.settle()

    def frozen(self, placed: Placed) -> bool:
        return self.tree.is_frozen_requested(placed.cgroup)

    def events(self, reason: str | None = None) -> list[dict]:  # type: ignore[type-arg]
        assert self.kube is not None
        return [e for e in self.kube.list_events() if reason is None or e["reason"] == reason]


