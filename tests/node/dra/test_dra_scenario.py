"""A workload on a DRA pool, node level, from its claim to its share, its limits and its metrics.

kube-scheduler's part is played by `allocated_claim` (a ResourceClaim whose status.allocation
names this node's device and the consumed cores/memory, reserved for the pod); kubelet's by the
1.36 emulator, through the plugin's real sockets; the runtime's by `resolve_cdi`. The real node
agent then enforces what the plugin registered (fixed-share MPS, memory limit, online/offline) on
simulated GPUs and a fake cgroup tree, and its /metrics shows the container.
"""
from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from dra_harness import NODE, DraNode, Grant, wait_until
from prometheus_client.parser import text_string_to_metric_families

from tessera.model.allocation_record import container_env
from tessera.model.contract import GpuShare
from tessera.model.quantity import parse_quantity
from tessera.sim.dra import Capacity, Device, DeviceRequest, RequestPolicy, allocate
from tessera_node.testing.dra_claims import allocated_claim

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
        settings = AgentSettings(
            node_name=NODE, state_dir=node.settings.state_dir, slow_every=1, pods_refresh_every=1, metrics_host="127.0.0.1", metrics_port=0,
            pools_file=node.settings.pools_file,
        )
        deps = AgentDeps(
            backend=node.backend, registry=node.registry, locator=self.tree.locator(), killer=self.killer, kube=node.kube,
            mps=MpsSupervisor(self.mps, node.root / "mps"), monotonic=self.clock, wall=self.wall,
        )
        self.agent = Agent(settings, deps)
        self.agent.start()
        self._pid = 5000

    def start_container(self, pod_name: str, container: str, gpu: int, memory_mib: int, sm_pct: int, namespace: str = "default") -> list[int]:
        """The runtime started the container: its cgroup, its GPU process, its id in pod status."""
        pod = self.node.kube.get_pod(namespace, pod_name)
        container_id = uuid.uuid4().hex
        self._pid += 1
        self.tree.container(pod["metadata"]["uid"], container_id, [self._pid])
        self.node.backend.add_process(self._pid, gpu, memory_mib, sm_pct)
        self.node.kube.delete_pod(namespace, pod_name)
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


# --- from the stack file: the workload's rendered claim template to its enforced share ----------
ROOT = Path(__file__).resolve().parents[3]
DRA_EXAMPLE = ROOT / "examples" / "dra" / "Pulumi.dra.yaml"
# the one selector form Tessera's DeviceClasses use (tessera/manifests/dra.py); kube-scheduler
# evaluates it as CEL, this emulation only for that form, so a new form fails here loudly
_POOL_SELECTOR = re.compile(r'^device\.driver == "gpu\.tessera\.dev" && device\.attributes\["gpu\.tessera\.dev"\]\.pool == "(?P<pool>[^"]+)"$')


def _render(out: Path) -> list[dict[str, Any]]:
    """`tessera render` of the shipped dra example, as a user runs it."""
    done = subprocess.run([sys.executable, "-m", "tessera.cli.main", "render", str(DRA_EXAMPLE), "-o", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return [d for f in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text(encoding="utf-8")) if d]


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def _capacity(entry: dict[str, Any], unit: int) -> Capacity:
    rng = entry["requestPolicy"]["validRange"]
    as_int = lambda q: int(parse_quantity(q) / unit)  # noqa: E731
    return Capacity(as_int(entry["value"]), RequestPolicy(as_int(entry["requestPolicy"]["default"]), as_int(rng["min"]), as_int(rng["step"]), as_int(rng["max"]) if "max" in rng else None))


def _allocate(node: DraNode, device_class: dict[str, Any], request: dict[str, Any]) -> Grant:
    """kube-scheduler's DRA allocator on this node (`tessera.sim.dra.allocate`: first fit in slice
    order, consumable capacity): the devices of the published slice the DeviceClass selects,
    minus what the claims in the API server already hold."""
    (selector,) = device_class["spec"]["selectors"]
    match = _POOL_SELECTOR.match(selector["cel"]["expression"])
    assert match, selector
    (slice_,) = node.slices()
    held: dict[tuple[str, str], int] = {}
    for claim in node.kube.list_resource_claims():
        for result in claim["status"]["allocation"]["devices"]["results"]:
            for name, value in result.get("consumedCapacity", {}).items():
                unit = MIB if name == "memory" else 1
                held[(result["device"], name)] = held.get((result["device"], name), 0) + int(parse_quantity(value) / unit)
    devices = [
        Device(d["name"], d["attributes"]["index"]["int"], d["attributes"]["model"]["string"],
               {"cores": _capacity(d["capacity"]["cores"], 1), "memory": _capacity(d["capacity"]["memory"], MIB)},
               bool(d.get("allowMultipleAllocations")), {c: held.get((d["name"], c), 0) for c in ("cores", "memory")})
        for d in slice_["spec"]["devices"] if d["attributes"]["pool"]["string"] == match["pool"]
    ]
    exactly = request["exactly"]
    asked = {k: int(parse_quantity(v) / (MIB if k == "memory" else 1)) for k, v in exactly["capacity"]["requests"].items()}
    results = allocate(devices, DeviceRequest(exactly["count"], asked))
    assert results is not None, "no device of the class has the capacity"
    (result,) = results
    return Grant(NODE, result.index, result.consumed["cores"], result.consumed["memory"])


def _slice_order(node: DraNode) -> list[str]:
    (slice_,) = node.slices()
    return [d["name"] for d in slice_["spec"]["devices"]]


def test_the_example_stacks_workload_from_its_claim_template_to_enforced_shares(tmp_path: Path) -> None:
    """`tessera render examples/dra/Pulumi.dra.yaml`: the workload `embedder` (25 % and 8 GiB of an
    L40S on pool l40s-dra, 2 replicas). Its pods' claims are made from the rendered
    ResourceClaimTemplate and allocated as kube-scheduler does against the slice the plugin
    published (the rendered DeviceClass selecting the pool's devices); the plugin, configured by
    the rendered pools file, prepares them through kubelet 1.36; the agent enforces and reports."""
    objects = _render(tmp_path / "out")
    template = _find(objects, "ResourceClaimTemplate", "embedder-gpu")
    deployment = _find(objects, "Deployment", "embedder")
    device_class = _find(objects, "DeviceClass", "l40s-dra.gpu.tessera.dev")
    pools_file = tmp_path / "pools.json"
    pools_file.write_text(_find(objects, "ConfigMap", "tessera-pools")["data"]["pools.json"], encoding="utf-8")
    pod_spec = deployment["spec"]["template"]["spec"]
    (entry,) = pod_spec["resourceClaims"]
    assert entry["resourceClaimTemplateName"] == "embedder-gpu" and pod_spec["schedulerName"] == "tessera-scheduler"
    (request,) = template["spec"]["spec"]["devices"]["requests"]

    node = DraNode(spec="L40S:4", sharing="best-effort")  # the pools file says fixed-share
    node.kube.patch_node_labels(NODE, dict(pod_spec["nodeSelector"]))
    node.settings = replace(node.settings, pools_file=pools_file)
    server = None
    try:
        node.start_plugin()
        node.start_kubelet()
        # another tenant's pod already holds half of gpu-2: binpack lists it first
        other = node.claim("other-gpu", [Grant(NODE, 2, 50, 4096)], pod="other")
        assert node.prepare(other)[other[2]].error == ""
        assert wait_until(lambda: _slice_order(node)[0] == "gpu-2"), _slice_order(node)

        placed = []
        for replica in range(deployment["spec"]["replicas"]):
            pod_name, claim_name = f"embedder-{replica}", f"embedder-{replica}-gpu-{replica:05d}"
            pod = node.kube.create_pod({
                "metadata": {"name": pod_name, "namespace": "inference", "labels": deployment["spec"]["template"]["metadata"]["labels"]},
                "spec": {**pod_spec, "nodeName": NODE},
                "status": {"phase": "Pending", "resourceClaimStatuses": [{"name": entry["name"], "resourceClaimName": claim_name}]},
            })
            grant = _allocate(node, device_class, request)
            claim = allocated_claim("inference", claim_name, [replace(grant, request=request["name"])], pods=[(pod_name, pod["metadata"]["uid"])])
            claim["spec"] = template["spec"]["spec"]
            uid = node.kube.put_resource_claim(claim)["metadata"]["uid"]
            results = node.prepare(("inference", claim_name, uid))
            seen = node.container(results, uid)
            gpu = node.backend.list_gpus()[grant.index]
            expected = container_env((GpuShare(grant.index, gpu.uuid, 25, 8192),), {grant.index: gpu.memory_mib}, mps=True, sm_counts={grant.index: gpu.sm_count})
            assert {k: seen.env[k] for k in expected} == expected, "the device-plugin route's env for the same share"
            assert seen.env["TESSERA_DRA_CLAIM"] == f"inference/{claim_name}"
            placed.append(grant.index)
        assert placed == [2, 2], "first fit over the binpack order: the fullest GPU that fits, as the device-plugin route's binpack"

        world = NodeWithAgent(node)
        pids = [world.start_container(f"embedder-{r}", "embedder", gpu=2, memory_mib=6000, sm_pct=25, namespace="inference") for r in range(2)]
        world.tick()
        gpu2 = next(g for g in world.agent.build_view().gpus if g.index == 2)
        assert gpu2.core_allocated_pct == 100 and gpu2.mps_daemon_running
        world.agent.publish()
        server, _thread, port = serve_metrics(world.agent.view.get, "127.0.0.1", 0)
        metrics = _scrape(f"http://127.0.0.1:{port}/metrics")
        for r in range(2):
            assert _of(metrics, "tessera_container_gpu_core_allocated_percent", pod=f"embedder-{r}", container="embedder") == [25]
            assert _of(metrics, "tessera_container_gpu_memory_limit_bytes", pod=f"embedder-{r}", container="embedder") == [8192 * MIB]
        node.backend.add_process(pids[1][0], 2, 9000, 25)  # replica 1 grows past its 8 GiB
        world.tick()
        assert world.killer.killed == pids[1]
        (event,) = world.events(REASON_MEMORY_EXCEEDED)
        assert event["involvedObject"]["name"] == "embedder-1"
    finally:
        if server is not None:
            server.shutdown()
        node.close()
