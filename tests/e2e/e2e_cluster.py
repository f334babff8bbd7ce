"""A whole Tessera cluster in one test process, every part real and talking over its real interface.

- API server: `tessera.kube.fake.FakeKubeApi` (watches, resourceVersions, Bindings, ConfigMaps).
- Admission: the real webhook over HTTPS on 127.0.0.1, configured from the rendered
  `tessera-webhook` ConfigMap; pods are created only after its JSONPatch is applied.
- Admission: the API server's Priority plugin resolves `priorityClassName` to `spec.priority`
  and `spec.preemptionPolicy` from the rendered PriorityClasses (unknown names are refused).
- Scheduling: the kube-scheduler emulator configured by the rendered `KubeSchedulerConfiguration`
  (it calls exactly the verbs that configuration declares, with its weight, nodeCacheCapable
  payloads and timeout), with kube-scheduler's TaintToleration and NodeAffinity filters from
  here and its NodeResourcesFit and DefaultPreemption; the real extender answers over loopback
  HTTP, started the way `tessera scheduler serve` starts it.
- Nodes of `shared` pools: labels and taints from the TKE node pool builder, the real device
  plugin on unix sockets, registered with the kubelet emulator (ListAndWatch, Allocate,
  PreStartContainer, PodResources), over a simulated GPU backend. kubelet's node-status sync of
  device plugin capacity is emulated here (`tessera.dev/gpu-core` = healthy devices).
- Node agent: the real `Agent` over the same simulated GPUs, the registry the device plugin
  writes, a fake cgroup tree and the rendered pools file, ticked by the test (manual clock).
"""
from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import shutil
import ssl
import tempfile
import threading

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from e2e_parts import EXTENDED, KubeletPodStatus, ManualClock, PodRefused, RecordingApi, job_pod, requested, wait_until
from e2e_stack import KubeObject, Rendered, node_labels, node_taints, runs_on, selects, tolerates
from kube_scheduler_emulator import UNRESOLVABLE, Attempt, ExtenderClient, ExtenderEntry, KubeSchedulerEmulator, Status, node_resources_fit

from tessera.model.stack import StackConfig
from tessera.alloc import PlacementPolicy
from tessera.model.contract import GPU_CORE, NVIDIA_GPU, POOLS_CONFIGMAP, POOLS_CONFIGMAP_KEY
from tessera.kube.api import KubeApi
from tessera.kube.fake import FakeKubeApi
from tessera.scheduler.http_server import ServerSettings as ExtenderServerSettings
from tessera.scheduler.service import ExtenderConfig, ExtenderService
from tessera.scheduler.sync import SyncSettings
from tessera.webhook.server import ServerSettings as WebhookServerSettings
from tessera.webhook.server import WebhookHttpServer, serve
from tessera.webhook.tls import generate_bundle
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.agent.loop import Agent, AgentDeps
from tessera_node.agent.mps import FakeProcessRunner, MpsSupervisor
from tessera_node.registry import ContainerRegistry
from tessera_node.agent.settings import AgentSettings
from tessera_node.agent.simscript import SimulatedKiller
from tessera_node.gpu.health import HealthSettings
from tessera_node.deviceplugin.plugin import DevicePlugin, DevicePluginSettings
from tessera_node.gpu.simulated import SimulatedBackend
from extender_stand_in import apply_json_patch
from tessera_node.testing.kubelet_emulator import ContainerView, KubeletEmulator
from tessera_node.testing.kubelet_versions import kubelet_for

FAST_PLUGIN = DevicePluginSettings(
    node_name="",
    tick_s=0.02,
    node_poll_s=0.05,
    reconcile_s=0.5,
    health=HealthSettings(recovery_quiet_s=0.3, responsiveness_check_s=0.05),
)


@dataclass
class SharedNode:
    """One node of a shared pool: simulated GPUs, kubelet emulator, device plugin, node agent."""

    name: str
    root: Path
    backend: SimulatedBackend
    kubelet: KubeletEmulator
    plugin: DevicePlugin
    settings: DevicePluginSettings
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    agent: Agent | None = None
    cgroups: CgroupTreeBuilder | None = None
    clock: ManualClock = field(default_factory=lambda: ManualClock(1000.0))
    wall: ManualClock = field(default_factory=lambda: ManualClock(1_700_000_000.0))
    pids: dict[tuple[str, str], int] = field(default_factory=dict)  # (pod uid, container) -> pid
    container_ids: dict[str, dict[str, str]] = field(default_factory=dict)  # pod uid -> container -> runtime id
    cgroup_dirs: dict[tuple[str, str], Path] = field(default_factory=dict)  # (pod uid, container) -> cgroup
    calls: set[str] = field(default_factory=set)  # KubeApi methods the node DaemonSet's processes used

    def start_agent(self, api: FakeKubeApi, pools_file: Path) -> Agent:
        if self.cgroups is None:
            self.cgroups = CgroupTreeBuilder(self.root / "host")
        settings = AgentSettings(
            node_name=self.name, state_dir=self.settings.state_dir, slow_every=1, pods_refresh_every=1,
            metrics_host="127.0.0.1", metrics_port=0, pools_file=pools_file,
        )
        deps = AgentDeps(
            backend=self.backend, registry=ContainerRegistry(self.settings.state_dir), locator=self.cgroups.locator(),
            killer=SimulatedKiller(self.backend), kube=cast(KubeApi, RecordingApi(KubeletPodStatus(api, self.container_ids), self.calls)), mps=MpsSupervisor(FakeProcessRunner(), self.root / "mps"),
            monotonic=self.clock, wall=self.wall,
        )
        self.agent = Agent(settings, deps)
        self.agent.start()
        return self.agent

    def tick(self, seconds: float = 0.1) -> None:
        assert self.agent is not None and self.cgroups is not None
        self.clock.now += seconds
        self.wall.now += seconds
        self.agent.tick()
        self.cgroups.settle()


# kube-apiserver's own classes (pkg/apis/scheduling: SystemCriticalPriority + 1000 for node-critical)
SYSTEM_PRIORITY_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}


class E2ECluster:
    def __init__(
        self,
        config: StackConfig,
        *,
        nodes: Mapping[str, int] | None = None,
        scheduler_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """`scheduler_config`: edits the rendered KubeSchedulerConfiguration before kube-scheduler
        reads it (what an operator's hand edit would do)."""
        self.config = config
        self.rendered = Rendered(config)
        self.root = Path(tempfile.mkdtemp(prefix="e2e", dir="/tmp"))  # unix socket paths must stay short
        self.api = FakeKubeApi()
        self.nodes: dict[str, SharedNode] = {}
        self.pool_of: dict[str, str] = {}
        self.pools_file = self.root / "pools.json"
        self.pools_file.write_text(self.rendered.configmap_file(POOLS_CONFIGMAP, POOLS_CONFIGMAP_KEY))
        self._closers: list[Callable[[], None]] = []
        self.extender_calls: set[str] = set()  # KubeApi methods the extender used
        counts = dict(nodes) if nodes is not None else {p.name: 1 for p in config.node_pools}
        for pool in config.node_pools:
            for i in range(counts.get(pool.name, 0)):
                self._add_node(pool, f"{pool.name}-{i}")
        self.extender = self._start_extender()
        self.webhook_port, self._webhook_ca = self._start_webhook()
        scheduler_document = self.rendered.scheduler_configuration()
        if scheduler_config is not None:
            scheduler_document = scheduler_config(scheduler_document)
        entry = ExtenderEntry.from_config(scheduler_document)
        self._client = ExtenderClient("127.0.0.1", self.extender.port, timeout_s=entry.http_timeout_s)
        self.scheduler = KubeSchedulerEmulator(
            self._client, self.api, entry,
            filters=[_taints_and_affinity, node_resources_fit(entry.ignored_by_scheduler)],
            delete_pod=lambda pod: self.delete(pod["metadata"]["namespace"], pod["metadata"]["name"]),
        )

    # --- nodes ------------------------------------------------------------------------------------
    def _add_node(self, pool: Any, name: str) -> None:
        labels = node_labels(self.config, pool.name)
        self.api.create_node(
            {
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": node_taints(self.config, pool.name)},
                "status": {"allocatable": {"cpu": "32", "memory": "128Gi"}, "capacity": {"cpu": "32", "memory": "128Gi"}},
            }
        )
        self.pool_of[name] = pool.name
        gpus = f"{pool.gpu_spec().name}:{pool.gpus_per_node()}"
        if pool.kind == "nvidia":
            # NVIDIA's device plugin (not Tessera's) advertises whole GPUs on this pool.
            self.api.patch_node_status_capacity(name, {NVIDIA_GPU: str(pool.gpus_per_node())})
            return
        if pool.kind != "shared":
            return
        root = self.root / name
        settings = replace(
            FAST_PLUGIN, node_name=name, device_plugin_dir=root / "dp", pod_resources_socket=root / "pr" / "kubelet.sock", state_dir=root / "state"
        )
        settings = _with_pools_file(settings, self.pools_file)
        backend = SimulatedBackend.from_spec(gpus, node_seed=name)
        version = kubelet_for(self.config.cluster.kubernetes_version or "1.30.0")  # kubelet runs the cluster's release
        kubelet = KubeletEmulator(settings.device_plugin_dir, settings.pod_resources_socket, self.api, version=version).start()
        calls: set[str] = set()
        plugin = DevicePlugin(settings, backend, cast(KubeApi, RecordingApi(self.api, calls)), ContainerRegistry(settings.state_dir))
        node = SharedNode(name, root, backend, kubelet, plugin, settings, calls=calls)
        node.thread = threading.Thread(target=plugin.run, args=(node.stop,), daemon=True, name=f"device-plugin-{name}")
        node.thread.start()
        self.nodes[name] = node
        assert kubelet.wait_for(lambda: kubelet.connected(GPU_CORE) and len(kubelet.devices(GPU_CORE)) > 0), f"{name}: plugin did not register"
        self.sync_node_status(name)

    def sync_node_status(self, name: str) -> None:
        """What kubelet does with a device plugin's ListAndWatch: capacity = healthy devices."""
        kubelet = self.nodes[name].kubelet
        healthy = sum(1 for h in kubelet.devices(GPU_CORE).values() if h == "Healthy")
        self.api.patch_node_status_capacity(name, {GPU_CORE: str(healthy)})

    def start_agent(self, name: str) -> Agent:
        return self.nodes[name].start_agent(self.api, self.pools_file)

    # --- control plane ----------------------------------------------------------------------------
    def _start_extender(self) -> ExtenderService:
        config = ExtenderConfig(
            policy=PlacementPolicy.parse(self.config.scheduler.placement),
            server=ExtenderServerSettings(host="127.0.0.1", port=0),
            sync=SyncSettings(watch_timeout_s=0.5, retry_backoff_s=0.1, janitor_interval_s=3600),
        )
        config = _with_pools_file(config, self.pools_file)
        service = ExtenderService(cast(KubeApi, RecordingApi(self.api, self.extender_calls)), config)
        assert service.start(wait_ready_s=10), "extender cache did not sync"
        self._closers.append(service.stop)
        shared = len(self.nodes)
        assert wait_until(lambda: service.state.summary()[0] == shared), "extender does not see every shared node"
        return service

    def _start_webhook(self) -> tuple[int, str]:
        bundle = generate_bundle(("localhost",), dt.datetime.now(dt.timezone.utc))
        started: list[WebhookHttpServer] = []
        ready = threading.Event()

        def on_ready(server: WebhookHttpServer) -> None:
            started.append(server)
            ready.set()

        settings = self.rendered.webhook_settings()
        thread = threading.Thread(
            target=serve, args=(WebhookServerSettings(host="127.0.0.1", port=0), replace(settings, tls=None), bundle),
            kwargs={"ready": on_ready}, daemon=True,
        )
        thread.start()
        assert ready.wait(10), "webhook did not start"
        self._closers.append(started[0].shutdown)
        return started[0].server_address[1], bundle.ca_pem

    def admit(self, pod: KubeObject, *, path: str = "/mutate") -> tuple[KubeObject, dict[str, Any]]:
        """POST an AdmissionReview to the webhook over HTTPS; (mutated pod, response)."""
        review = {
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": pod["metadata"].get("namespace", "default"), "operation": "CREATE", "object": pod,
            },
        }
        context = ssl.create_default_context(cadata=self._webhook_ca)
        conn = http.client.HTTPSConnection("localhost", self.webhook_port, context=context, timeout=10)
        try:
            conn.request("POST", path, body=json.dumps(review).encode(), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        assert resp.status == 200, body
        response: dict[str, Any] = json.loads(body)["response"]
        mutated = json.loads(json.dumps(pod))
        if "patch" in response:
            apply_json_patch(mutated, json.loads(base64.b64decode(response["patch"])))
        return mutated, response

    def create(self, pod: KubeObject) -> KubeObject:
        """kubectl create: admission, then the API server stores the pod (or refuses it)."""
        pod = self._resolve_priority(pod)
        mutated, response = self.admit(pod)
        if not response["allowed"]:
            raise PodRefused(response["status"]["message"])
        return self.api.create_pod(mutated)

    def _resolve_priority(self, pod: KubeObject) -> KubeObject:
        """The Priority admission plugin: priorityClassName -> spec.priority, spec.preemptionPolicy."""
        pod = json.loads(json.dumps(pod))
        spec = pod.setdefault("spec", {})
        name = spec.get("priorityClassName")
        if not name:
            spec.setdefault("priority", 0)  # no globalDefault class is rendered
            return pod
        classes = {o["metadata"]["name"]: o for o in self.rendered.objects() if o["kind"] == "PriorityClass"}
        if name in SYSTEM_PRIORITY_CLASSES:
            spec["priority"], spec["preemptionPolicy"] = SYSTEM_PRIORITY_CLASSES[name], "PreemptLowerPriority"
        elif name in classes:
            spec["priority"] = classes[name]["value"]
            spec["preemptionPolicy"] = classes[name].get("preemptionPolicy", "PreemptLowerPriority")
        else:
            raise PodRefused(f'pods "{pod["metadata"]["name"]}" is forbidden: no PriorityClass with name {name} was found')
        return pod

    def schedule(self, namespace: str, name: str) -> Attempt:
        """One scheduling cycle: tessera-scheduler (kube-scheduler + extender) for our pods."""
        pod = self.api.get_pod(namespace, name)
        if pod["spec"].get("schedulerName") != self.rendered.webhook_settings().scheduler_name:
            # default-scheduler: no extender; first feasible node wins
            feasible = [n for n in self.api.list_nodes() if self._fits(pod, n)]
            if not feasible:
                return Attempt(error="0 nodes are available")
            node = feasible[0]["metadata"]["name"]
            self.api.bind_pod(namespace, name, pod["metadata"]["uid"], node)
            return Attempt(node=node, feasible=[node])
        attempt = self.scheduler.schedule(namespace, name)
        if attempt.node is None and not attempt.error and not (attempt.preemption and attempt.preemption.nominated):
            reasons = sorted({*attempt.failed.values(), *attempt.unresolvable.values()})
            attempt.error = f"0/{len(self.api.list_nodes())} nodes are available: {'; '.join(reasons)}"
        return attempt

    def _fits(self, pod: KubeObject, node: KubeObject) -> bool:
        spec, meta = pod["spec"], node["metadata"]
        if not selects(spec, meta.get("labels") or {}):
            return False
        if not tolerates(list(spec.get("tolerations") or []), list((node.get("spec") or {}).get("taints") or [])):
            return False
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        used = requested(p for p in self.api.list_pods(node_name=meta["name"]) if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
        wanted = requested([pod])
        return all(used.get(r, 0) + wanted[r] <= int(allocatable.get(r, 0)) for r in EXTENDED if wanted.get(r, 0))

    def run(self, namespace: str, name: str) -> dict[str, ContainerView]:
        """kubelet on the pod's node: Allocate then start every GPU container; what each one sees."""
        pod = self.api.get_pod(namespace, name)
        node = self.nodes[pod["spec"]["nodeName"]]
        views = {}
        for container in pod["spec"]["containers"]:
            if GPU_CORE in ((container.get("resources") or {}).get("limits") or {}):
                node.kubelet.allocate(namespace, name, container["name"], GPU_CORE)
        for container in pod["spec"]["containers"]:
            if GPU_CORE in ((container.get("resources") or {}).get("limits") or {}):
                views[container["name"]] = node.kubelet.start_container(namespace, name, container["name"], GPU_CORE)
        self.api.set_pod_phase(namespace, name, "Running")
        return views

    def submit_and_run(self, pod: KubeObject) -> tuple[KubeObject, dict[str, ContainerView]]:
        created = self.create(pod)
        meta = created["metadata"]
        attempt = self.schedule(meta["namespace"], meta["name"])
        assert attempt.node, f"{meta['name']} was not scheduled: {attempt}"
        views = self.run(meta["namespace"], meta["name"])
        return self.api.get_pod(meta["namespace"], meta["name"]), views

    def delete(self, namespace: str, name: str) -> None:
        """kubectl delete pod: the API object goes, kubelet frees its devices, the extender its share."""
        pod = self.api.get_pod(namespace, name)
        self.api.delete_pod(namespace, name)
        node = self.nodes.get(pod["spec"].get("nodeName") or "")
        if node is not None:
            node.kubelet.remove_pod(namespace, name)
        uid = pod["metadata"]["uid"]
        assert wait_until(lambda: self.extender.state.holding(uid) is None), f"the extender still holds {name}"

    def start_process(self, pod: KubeObject, container: str, *, sm_pct: int, memory_mib: int = 512) -> Path:
        """A CUDA process of `container` on its GPU (or new figures for it): in the container's
        cgroup and in the driver. Returns the container's cgroup directory."""
        node = self.nodes[pod["spec"]["nodeName"]]
        if node.cgroups is None:
            node.cgroups = CgroupTreeBuilder(node.root / "host")  # the host's cgroup and /proc trees
        key = (pod["metadata"]["uid"], container)
        if key not in node.pids:
            node.pids[key] = 40_000 + len(node.pids)
            container_id = uuid.uuid4().hex * 2
            node.container_ids.setdefault(key[0], {})[container] = container_id
            node.cgroup_dirs[key] = node.cgroups.container(key[0], container_id, [node.pids[key]])
        gpu = int(pod["metadata"]["annotations"]["tessera.dev/gpu-index-container-" + container].split(",")[0])
        node.backend.add_process(node.pids[key], gpu, memory_mib, sm_pct)
        return node.cgroup_dirs[key]

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        self._client.close()
        for node in self.nodes.values():
            node.stop.set()
        for node in self.nodes.values():
            if node.thread is not None:
                node.thread.join(15)
            node.kubelet.stop()
        self.api.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _taints_and_affinity(pod: KubeObject, node: KubeObject, _pods: Any) -> Status | None:
    """kube-scheduler's TaintToleration and NodeAffinity filters (UnschedulableAndUnresolvable)."""
    if not tolerates(list(pod["spec"].get("tolerations") or []), list((node.get("spec") or {}).get("taints") or [])):
        return Status(UNRESOLVABLE, ("node(s) had untolerated taint",))
    if not selects(pod["spec"], node["metadata"].get("labels") or {}):
        return Status(UNRESOLVABLE, ("node(s) didn't match Pod's node affinity/selector",))
    return None


_Settings = TypeVar("_Settings", ExtenderConfig, DevicePluginSettings)


def _with_pools_file(settings: _Settings, path: Path) -> _Settings:
    """Hand the rendered pools file to a component whose settings take one (`pools_file`), as the
    DaemonSet and Deployment mount it; components that do not read it yet are left as they are."""
    if "pools_file" in {f.name for f in fields(settings)}:
        return cast(_Settings, replace(settings, pools_file=path))  # type: ignore[call-arg]
    return settings


__all__ = ["E2ECluster", "PodRefused", "RecordingApi", "SharedNode", "job_pod", "runs_on", "wait_until"]
