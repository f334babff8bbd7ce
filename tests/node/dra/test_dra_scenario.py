"""A workload on a DRA pool, node level, from its claim to its share, its limits and its metrics.

kube-scheduler's part is played by `allocated_claim` (a ResourceClaim whose status.allocation
names this node's device and the consumed cores/memory, reserved for the pod); kubelet's by the
1.36 emulator, through the plugin's real sockets; the runtime's by `resolve_cdi`. The real node
agent then enforces what the plugin registered (fixed-share MPS, memory limit, online/offline) on
simulated GPUs and a fake cgroup tree, and its /metrics shows the container.
"""
from __future__ import annotations

import urllib.request
import uuid

from dra_harness import NODE, DraNode, Grant
from prometheus_client.parser import text_string_to_metric_families

from tessera_node.agent.cgroups import CgroupDriver, CgroupVersion
from tessera_node.agent.colocation import REASON_PAUSED
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.agent.loop import Agent, AgentDeps
from tessera_node.agent.memory import REASON_MEMORY_EXCEEDED
from tessera_node.agent.metrics import serve_metrics
from tessera_node.agent.mps import FakeProcessRunner, MpsSupervisor
from tessera_node.agent.settings import AgentSettings
from tessera_node.agent.simscript import SimulatedKiller

MIB = 1024 * 1024


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class NodeWithAgent:
    def __init__(self, node: DraNode) -> None:
        self.node = node
        self.tree = CgroupTreeBuilder(node.root / "host", CgroupVersion.V2, CgroupDriver.SYSTEMD)
        self.clock, self.wall = Clock(1000.0), Clock(1_700_000_000.0)
        self.killer = SimulatedKiller(node.backend)
        self.mps = FakeProcessRunner()
        settings = AgentSettings(node_name=NODE, state_dir=node.settings.state_dir, slow_every=1, pods_refresh_every=1, metrics_host="127.0.0.1", metrics_port=0)
        deps = AgentDeps(
            backend=node.backend, registry=node.registry, locator=self.tree.locator(), killer=self.killer, kube=node.kube,
            mps=MpsSupervisor(self.mps, node.root / "mps"), monotonic=self.clock, wall=self.wall,
        )
        self.agent = Agent(settings, deps)
        self.agent.start()
        self._pid = 5000

    def start_container(self, pod_name: str, container: str, gpu: int, memory_mib: int, sm_pct: int) -> list[int]:
        """The runtime started the container: its cgroup, its GPU process, its id in pod status."""
        pod = self.node.kube.get_pod("default", pod_name)
        container_id = uuid.uuid4().hex
        self._pid += 1
        self.tree.container(pod["metadata"]["uid"], container_id, [self._pid])
        self.node.backend.add_process(self._pid, gpu, memory_mib, sm_pct)
        self.node.kube.delete_pod("default", pod_name)
        pod["metadata"].pop("resourceVersion", None)
        pod["status"] = {"phase": "Running", "containerStatuses": [{"name": container, "containerID": f"containerd://{container_id}"}]}
        self.node.kube.create_pod(pod)
        return [self._pid]

    def tick(self, seconds: float = 1.0) -> None:
        self.clock.now += seconds
        self.wall.now += seconds
        self.agent.tick()
        self.tree.settle()

    def events(self, reason: str) -> list[dict]:  # type: ignore[type-arg]
        return [e for e in self.node.kube.list_events() if e["reason"] == reason]


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def _of(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> list[float]:
    return [v for got, v in metrics.get(name, []) if all(got.get(k) == want for k, want in labels.items())]


def test_a_claim_on_a_fixed_share_pool_from_allocation_to_enforced_limits_and_metrics() -> None:
    node = DraNode(spec="T4:2", sharing="fixed-share")
    server = None
    try:
        node.start_plugin()
        node.start_kubelet()
        # the slice the scheduler allocates from
        (slice_,) = node.slices()
        assert [d["name"] for d in slice_["spec"]["devices"]] == ["gpu-0", "gpu-1"]
        # kube-scheduler: 30 cores and 4 GiB of gpu-1 for pod "infer"
        claim = node.claim("infer-gpu", [Grant(NODE, 1, 30, 4096)], pod="infer")
        results = node.prepare(claim)
        seen = node.container(results, claim[2])
        assert seen.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
        assert seen.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
        assert seen.env["NVIDIA_VISIBLE_DEVICES"] == node.backend.list_gpus()[1].uuid
        assert ("/run/tessera/mps", "/run/tessera/mps") in seen.mounts

        world = NodeWithAgent(node)
        pids = world.start_container("infer", "main", gpu=1, memory_mib=3000, sm_pct=30)
        world.tick()
        view = world.agent.build_view()
        gpu1 = next(g for g in view.gpus if g.index == 1)
        assert gpu1.core_allocated_pct == 30 and gpu1.memory_allocated_mib == 4096
        assert gpu1.mps_daemon_running, "fixed-share: the agent runs the GPU's MPS control daemon"
        assert world.killer.killed == [] and world.events(REASON_MEMORY_EXCEEDED) == []

        world.agent.publish()
        server, _thread, port = serve_metrics(world.agent.view.get, "127.0.0.1", 0)
        metrics = _scrape(f"http://127.0.0.1:{port}/metrics")
        assert _of(metrics, "tessera_container_gpu_memory_limit_bytes", pod="infer", container="main") == [4096 * MIB]
        assert _of(metrics, "tessera_container_gpu_memory_used_bytes", pod="infer", container="main") == [3000 * MIB]
        assert _of(metrics, "tessera_container_gpu_core_allocated_percent", pod="infer", container="main") == [30]

        # over its claim's memory: the agent kills the container's GPU processes, and says so
        node.backend.add_process(pids[0], 1, 5000, 30)  # the process grows past 4096 MiB
        world.tick()
        assert world.killer.killed == pids
        (event,) = world.events(REASON_MEMORY_EXCEEDED)
        assert event["involvedObject"]["name"] == "infer"

        # unprepare: the agent no longer counts the share
        assert node.kubelet.node_unprepare([claim]) == {claim[2]: ""}
        world.tick()
        assert next(g for g in world.agent.build_view().gpus if g.index == 1).core_allocated_pct == 0
    finally:
        if server is not None:
            server.shutdown()
        node.close()


def test_online_offline_colocation_through_claims() -> None:
    node = DraNode(spec="T4:1", sharing="best-effort")
    node.kube.patch_node_labels("gpu-node-1", {"tessera.dev/online-offline": "true"})
    try:
        node.start_plugin()
        node.start_kubelet()
        online = node.claim("online", [Grant(NODE, 0, 50, 4096)], pod="serve", app_class="online")
        offline = node.claim("offline", [Grant(NODE, 0, 50, 4096)], pod="train", app_class="offline")
        results = node.prepare(online, offline)
        assert not any(k.startswith("CUDA_MPS_") for k in node.container(results, online[2]).env)  # best-effort: no MPS
        world = NodeWithAgent(node)
        world.start_container("train", "main", gpu=0, memory_mib=1000, sm_pct=90)
        world.start_container("serve", "main", gpu=0, memory_mib=1000, sm_pct=60)
        world.tick(0.1)
        world.tick(0.1)
        assert world.events(REASON_PAUSED), "online work on the GPU pauses the offline container"
    finally:
        node.close()
