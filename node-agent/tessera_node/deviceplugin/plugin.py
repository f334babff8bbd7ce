"""The device plugin process: one supervisor loop around the gRPC server.

Every `tick_s` (default 100 ms; the Xid wait doubles as the sleep) the supervisor
- re-creates its socket and registers again when kubelet restarted or wiped the socket;
- applies Xid events and, every few seconds, probes GPUs (health.py) and pushes a new device
  list to ListAndWatch streams and the node annotation when health changed;
- evicts the pods of a GPU that became unhealthy, so they are rescheduled (eviction.py);
- every `node_poll_s` reads the node and the pools file: the pool's sharing policy (the pools
  file entry wins, then the node's labels, read by `tessera.model.pool_policy.read_pool_policy`
  as the agent and the extender read it), and
  gpu-operator's paused-for-mig-change label (pause.py), stepping aside while it is set;
- every `reconcile_s` re-derives the agent's container registry from kubelet's PodResources and the
  pods' allocation records, so nothing the plugin knows lives only in its memory: a restarted
  plugin rebuilds the same state (no allocation lost or duplicated).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tessera.model.contract import GPU_CORE, GPU_MEMORY, NodeGpu
from tessera.kube.api import KubeApi, KubeApiError, NotFound
from tessera_node.registry import ContainerKey, ContainerName, ContainerRegistry, PodUid, RegisteredContainer
from tessera.model.pool_policy import DEFAULT_POOL_POLICY, read_pool_policy
from tessera.model.pools_file import PoolsFile
from tessera_node.deviceplugin.core import AllocateSettings, Inventory
from tessera_node.deviceplugin.eviction import EvictionSettings, Evictor
from tessera_node.gpu.health import HealthSettings, HealthTracker
from tessera_node.deviceplugin.metrics import PluginCounters, PluginMetricsView
from tessera_node.deviceplugin.pause import PauseTransition, node_labels, transition
from tessera_node.deviceplugin.podresources import DEFAULT_SOCKET, PodResourcesClient, PodResourcesError
from tessera_node.deviceplugin.prestart import PreStartRejected, find_owner, verify
from tessera_node.deviceplugin.publish import NodeReport, publish
from tessera_node.deviceplugin.registry_writer import RegistryWriter
from tessera_node.deviceplugin.registration import KUBELET_SOCKET_NAME, RegistrationError, SocketIdentity, needs_registration, register
from tessera_node.deviceplugin.server import DevicePluginServicer, PluginServer, PluginState, RpcTimings
from tessera_node.gpu.backend import GpuBackend, GpuBackendError, GpuIndex, MigMode

log = logging.getLogger("tessera.deviceplugin")
# How long without an Allocate or PreStartContainer before background reconciliation may run.
_RECONCILE_QUIET_S = 0.2
# After a pass gave way to container starts, wait this long before trying again (each attempt
# costs a PodResources List, which kubelet rate-limits for all its clients together).
_RECONCILE_RETRY_S = 1.0


@dataclass(frozen=True)
class Ready:
    """What the plugin serves, once kubelet accepted its first registration."""

    socket: Path
    kubelet_socket: Path
    resource: str
    devices: int
    gpus: tuple[str, ...]  # model per advertised GPU
    memory_mib: int  # published as node capacity of tessera.dev/gpu-memory

    def line(self) -> str:
        models = ", ".join(f"{n} x {m}" for m, n in sorted(Counter(self.gpus).items())) or "no GPUs"
        return (
            f"ready: serving {self.resource} ({self.devices} devices on {len(self.gpus)} GPU{'' if len(self.gpus) == 1 else 's'}: {models}) "
            f"on {self.socket}, "
            f"registered with kubelet at {self.kubelet_socket}; {GPU_MEMORY} {self.memory_mib} MiB published as node capacity"
        )


@dataclass(frozen=True)
class DevicePluginSettings:
    """Settings of `tessera node device-plugin`."""

    node_name: str
    """The node this plugin runs on (downward API `spec.nodeName`)."""
    device_plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    """kubelet's device plugin directory; kubelet.sock lives inside. Default: kubelet's default."""
    pod_resources_socket: Path = DEFAULT_SOCKET
    """kubelet's PodResources socket. Default /var/lib/kubelet/pod-resources/kubelet.sock."""
    state_dir: Path = Path("/var/lib/tessera/agent")
    """Where the container registry shared with the node agent lives (hostPath). Default: the
    agent's default, so both processes see the same records."""
    endpoint: str = "tessera-gpu-core.sock"
    """File name of the plugin socket inside `device_plugin_dir`."""
    tick_s: float = 0.1
    """Supervisor period. Default 100 ms: a kubelet restart is noticed and answered well within
    the 1 s target, at a cost of one stat() pair per tick."""
    node_poll_s: float = 1.0
    """How often the node object is read (labels: pause, sharing policy). Default 1 s: the MIG
    manager waits for the plugin to go away, so a second of delay only delays the MIG change."""
    republish_s: float = 60.0
    """Re-assert the node annotation and gpu-memory capacity this often even without a change.
    Default 60 s: kubelet may reset extended resources it does not own after it restarts."""
    reconcile_s: float = 30.0
    """Re-derive the registry from PodResources and pods this often. Default 30 s."""
    pod_resources_prefetch: bool = True
    """After each Allocate, look up in the background (a PodResources List, at most 50/s) who got
    the devices, so PreStartContainer usually answers without calling kubelet. Default on: kubelet
    starts a container well after admitting it, and it halved PreStartContainer's p50 pod by pod
    (docs/benchmarks.md). Off: one List per start that misses, as before."""
    pools_file: Path | None = None
    """The mounted `tessera-pools` ConfigMap (`--pools-file`, default $TESSERA_POOLS_FILE). Default
    None = node labels alone; the DaemonSet always sets it, so the plugin and the agent follow the
    same pool policy after an edit that changed only the ConfigMap."""
    health: HealthSettings = field(default_factory=HealthSettings)
    eviction: EvictionSettings = field(default_factory=EvictionSettings)
    allocate: AllocateSettings = field(default_factory=AllocateSettings)


def inventory_from_backend(backend: GpuBackend) -> Inventory:
    """GPUs to advertise: every GPU without MIG enabled (a MIG-enabled GPU is served by NVIDIA's
    plugin as slices and cannot be shared by us)."""
    return Inventory.of(
        NodeGpu(g.index, g.uuid, g.model, g.memory_mib, True, g.sm_count) for g in backend.list_gpus() if g.mig_mode is not MigMode.ENABLED
    )


class DevicePlugin:
    def __init__(
        self,
        settings: DevicePluginSettings,
        backend: GpuBackend,
        kube: KubeApi,
        registry: ContainerRegistry,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_ready: Callable[[Ready], None] | None = None,
    ) -> None:
        self.settings = settings
        self._on_ready = on_ready or (lambda ready: log.info("%s", ready.line()))
        self._backend = backend
        self._kube = kube
        self._registry = registry
        self._writer = RegistryWriter(registry)
        self._clock = clock
        self._policy = DEFAULT_POOL_POLICY
        self._pools = PoolsFile(settings.pools_file)
        self._labels: Mapping[str, str] | None = None  # the node's labels as last read; None until read
        self._policy_lock = threading.Lock()
        self._policy_inputs: tuple[Mapping[str, str], Mapping[str, Any]] | None = None  # what `_policy` was derived from
        self._evictor = Evictor(settings.eviction, kube, settings.node_name)
        self.state = PluginState(Inventory(()), settings.allocate)
        self._pod_resources = PodResourcesClient(settings.pod_resources_socket, prefetch_gap_s=0.02 if settings.pod_resources_prefetch else 0.0)
        self._servicer = DevicePluginServicer(
            self.state, self.prestart, before_allocate=self._before_allocate, after_allocate=self._pod_resources.after_allocate
        )
        self._last_rpc = float("-inf")  # when an Allocate or PreStartContainer last began (`clock`)
        self._server = PluginServer(settings.device_plugin_dir / settings.endpoint, self._servicer)
        self._health = HealthTracker(settings.health, ())
        self._registered_with: SocketIdentity | None = None
        self._published: NodeReport | None = None
        self.paused = False
        self._waiting_logged = False
        self.registrations = 0  # successful Register calls, for tests and logs
        self.counters = PluginCounters()

    @property
    def rpc_timings(self) -> RpcTimings:
        """Handler time of each Allocate and PreStartContainer (benchmarks, diagnosis)."""
        return self._servicer.timings

    # --- PreStartContainer (called from gRPC threads) -------------------------------------------
    def _before_allocate(self, tokens: Sequence[str]) -> None:
        self._last_rpc = self._clock()
        self._pod_resources.note_allocate(tokens)  # before kubelet can record the assignment
        self._apply_policy()

    def metrics_view(self) -> PluginMetricsView:
        """The figures one /metrics scrape reports (any thread)."""
        ok, failed, accepted, rejected = self.counters.snapshot()
        gpus = self.state.inventory.gpus
        healthy = sum(1 for g in gpus if g.healthy)
        registered = self._registered_with is not None and not self.paused and self._server.socket_path.exists()
        return PluginMetricsView(GPU_CORE, registered, self.paused, ok, failed, healthy, len(gpus) - healthy, accepted, rejected)

    def prestart(self, tokens: Sequence[str]) -> None:
        try:
            self._prestart(tokens)
        except PreStartRejected:
            self.counters.count("starts_rejected")
            raise
        self.counters.count("starts_accepted")

    def _prestart(self, tokens: Sequence[str]) -> None:
        self._last_rpc = self._clock()
        self._writer.note_activity()
        self._apply_policy()
        try:
            holders = self._pod_resources.holders_of(tokens)
        except PodResourcesError as exc:
            raise PreStartRejected(str(exc)) from exc
        owner = find_owner(holders, tokens)
        try:
            pod = self._kube.get_pod(owner.namespace, owner.pod)
        except KubeApiError as exc:
            raise PreStartRejected(f"cannot read pod {owner.namespace}/{owner.pod} ({exc}); kubelet will retry the start") from exc
        record = verify(
            owner=owner,
            tokens=tokens,
            pod=pod,
            get_configmap=self._kube.get_configmap,
            node_name=self.settings.node_name,
            inventory=self.state.inventory,
            policy=self._policy,
        )
        self._writer.submit(record)
        log.info("container %s/%s/%s started on GPU(s) %s", owner.namespace, owner.pod, owner.container, [s.index for s in record.shares])

    # --- lifecycle ------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Serve until `stop` is set; always leaves the socket removed and GPU handles released."""
        try:
            self.read_node()
            if not self.paused:
                self._start_serving()
            next_node = next_publish = reconcile_due = next_reconcile = next_probe = self._clock()
            while not stop.is_set():
                now = self._clock()
                if now >= next_node:
                    next_node = now + self.settings.node_poll_s
                    self.read_node()
                if self.paused:
                    stop.wait(self.settings.tick_s)
                    continue
                self._ensure_registered()
                changed = self._health.on_xids(self._backend.poll_xid_events(self.settings.tick_s), self._clock())
                if self._clock() >= next_probe:
                    next_probe = self._clock() + self.settings.health.responsiveness_check_s
                    changed |= self._health.on_probe(lambda g: self._backend.is_responsive(GpuIndex(g)), self._clock())
                if changed:
                    for gpu in sorted(changed):
                        log.warning("GPU %d is now %s %s", gpu, "healthy" if self._health.healthy(gpu) else "unhealthy", self._health.reason(gpu))
                        self._note_health(gpu)
                    self.state.update(self.state.inventory.with_health(self._health.health()))
                    self._publish(force=True)
                self._evictor.step(self._clock())
                if self._clock() >= next_publish:
                    next_publish = self._clock() + self.settings.republish_s
                    self._publish(force=True)
                now = self._clock()
                # Reconciling reads every holder's pod: work that competes with container starts
                # for the GIL. It is a safety net nothing waits on, so it gives way to
                # Allocate/PreStartContainer calls, for at most one period.
                if now >= next_reconcile:
                    overdue = now >= reconcile_due + self.settings.reconcile_s
                    if overdue or not self._rpcs_active():
                        if self.reconcile(give_way=not overdue):
                            reconcile_due = next_reconcile = now + self.settings.reconcile_s
                        else:
                            next_reconcile = now + min(_RECONCILE_RETRY_S, self.settings.reconcile_s)
        finally:
            self._stop_serving()
            self.state.close()
            self._pod_resources.close()
            self._writer.close()

    def _note_health(self, index: int) -> None:
        gpu = next((g for g in self.state.inventory.gpus if g.index == index), None)
        if gpu is None:
            return
        if self._health.healthy(index):
            self._evictor.gpu_healthy(gpu.uuid)
        else:
            self._evictor.gpu_unhealthy(gpu, self._health.reason(index), self._clock())

    def _start_serving(self) -> None:
        self._backend.open()
        inventory = inventory_from_backend(self._backend)
        self._health = HealthTracker(self.settings.health, [g.index for g in inventory.gpus])
        self._evictor.reset()
        self.state.update(inventory)
        self._publish(force=True)
        self._registered_with = None
        self._ensure_registered()

    def _stop_serving(self) -> None:
        self._server.stop()
        self._registered_with = None
        try:
            self._backend.close()
        except GpuBackendError:
            pass

    def _ensure_registered(self) -> None:
        kubelet_socket = self.settings.device_plugin_dir / KUBELET_SOCKET_NAME
        kubelet_now = SocketIdentity.of(kubelet_socket)
        if kubelet_now is None and not self._waiting_logged:
            self._waiting_logged = True
            log.info("waiting for kubelet: no socket at %s yet (--device-plugin-dir)", kubelet_socket)
        if not needs_registration(self._registered_with, kubelet_now, self._server.socket_path.exists()):
            return
        self._waiting_logged = False
        self._server.start()  # a fresh socket: kubelet wiped the old one when it restarted
        try:
            register(kubelet_socket, self.settings.endpoint, GPU_CORE, timeout_s=1.0)
        except RegistrationError as exc:
            log.warning("%s; retrying", exc)
            self.counters.count("registrations_failed")
            return
        self._registered_with = kubelet_now
        self.registrations += 1
        self.counters.count("registrations_ok")
        inventory = self.state.inventory
        if self.registrations == 1:
            self._on_ready(Ready(
                self._server.socket_path, kubelet_socket, GPU_CORE, len(inventory.devices()),
                tuple(g.model for g in inventory.gpus), inventory.healthy_memory_mib,
            ))
        else:
            log.info("registered %s with kubelet again (%d GPUs): kubelet restarted or the socket was removed", GPU_CORE, len(inventory.gpus))
        self._publish(force=True)  # kubelet may have reset extended resources while restarting

    def read_node(self) -> None:
        try:
            node = self._kube.get_node(self.settings.node_name)
        except NotFound:
            log.warning("node %s not found; check --node-name", self.settings.node_name)
            return
        except KubeApiError as exc:
            log.warning("cannot read node %s: %s", self.settings.node_name, exc)
            return
        labels = node_labels(node)
        self._labels = labels
        self._apply_policy()
        step = transition(self.paused, labels)
        if step is PauseTransition.PAUSE:
            log.info("node labelled paused-for-mig-change: stopping and releasing the GPUs")
            self.paused = True
            self._stop_serving()
            self.state.update(self.state.inventory.all_unhealthy())
            self._publish(force=True)
        elif step is PauseTransition.RESUME:
            log.info("MIG change finished: re-reading GPUs and registering again")
            self.paused = False
            self._start_serving()

    def _apply_policy(self) -> None:
        """The pool policy from the node's last labels and the pools file as it is now (a stat;
        parsed again only when it changed). Called on every node poll and before every Allocate
        and PreStartContainer, so a container starts under the policy the file says now, not the
        one of the last poll: the agent reads the same file for its MPS daemons."""
        labels = self._labels
        if labels is None:
            return
        with self._policy_lock:
            pools = self._pools.document()
            inputs = self._policy_inputs
            if inputs is not None and inputs[0] is labels and inputs[1] is pools:
                return  # same labels object and same parsed file: the policy cannot have changed
            reading = read_pool_policy(labels, pools)
            for problem in reading.problems:
                log.warning("pool policy: ignoring %s", problem)
            policy = reading.policy
            if policy != self._policy:
                log.info("pool policy: sharing %s", policy.sharing)
            self._policy = policy
            base = self.state.allocate_settings
            self.state.set_allocate_settings(AllocateSettings(base.mps_pipe_host_dir, base.mps_shm_host_dir, policy.uses_mps, policy.sharing))
            self._policy_inputs = (labels, pools)

    def _publish(self, *, force: bool = False) -> None:
        report = NodeReport.of(self.state.inventory)
        if not force and report == self._published:
            return
        try:
            publish(self._kube, self.settings.node_name, report)
            self._published = report
        except KubeApiError as exc:
            log.warning("cannot update node %s: %s", self.settings.node_name, exc)

    def _rpcs_active(self) -> bool:
        return self._clock() - self._last_rpc < _RECONCILE_QUIET_S

    def reconcile(self, *, give_way: bool = False) -> bool:
        """Make the registry match kubelet's PodResources and the pods' allocation records.
        With `give_way`, stops without changing anything as soon as an Allocate or
        PreStartContainer comes in, and returns False (the caller retries later); so it does
        while no kubelet has accepted the plugin (nothing to ask)."""
        if give_way and self._rpcs_active():
            return False  # a start arrived since the caller looked: do not spend a List on it
        if self._registered_with is None:
            return False  # no kubelet to ask yet (not started, or restarting): try again shortly
        # Snapshot before listing: a container registered by a PreStartContainer that runs while we
        # reconcile is newer than our PodResources answer and must not be dropped.
        before = self._registry.all()
        try:
            holders = self._pod_resources.list_holders()
        except PodResourcesError as exc:
            log.warning("%s", exc)
            return True  # retried at the next period, like a finished pass
        # Live containers by pod uid: a StatefulSet pod recreated under the same name is a new pod,
        # and the old one's record must go. Only where the pod cannot be read is the name all we
        # have, and then records under that name are kept until a later pass can tell.
        live_keys: set[ContainerKey] = set()
        unreadable: set[tuple[str, str, str]] = set()
        found: list[RegisteredContainer] = []
        for holder in holders:
            if give_way and self._rpcs_active():
                return False
            try:
                pod = self._kube.get_pod(holder.namespace, holder.pod)
            except KubeApiError as exc:
                unreadable.add((holder.namespace, holder.pod, holder.container))
                log.debug("cannot read pod %s/%s: %s", holder.namespace, holder.pod, exc)
                continue
            live_keys.add(ContainerKey(PodUid(str((pod.get("metadata") or {}).get("uid", ""))), ContainerName(holder.container)))
            try:
                record = verify(
                    owner=find_owner([holder], sorted(holder.tokens)),
                    tokens=sorted(holder.tokens),
                    pod=pod,
                    get_configmap=self._kube.get_configmap,
                    node_name=self.settings.node_name,
                    inventory=self.state.inventory,
                    policy=self._policy,
                )
            except (PreStartRejected, KubeApiError) as exc:
                log.debug("not registering %s/%s/%s: %s", holder.namespace, holder.pod, holder.container, exc)
                continue
            found.append(record)
        current = self._registry.snapshot()
        # The agent fills in container_id later; a record equal but for it is up to date.
        stale = [r for r in found if (existing := current.get(r.key)) is None or replace(existing, container_id=None) != r]
        if stale:
            self._registry.register_all(stale)  # one rewrite: after a lost state dir that is every container
        for record in before:
            if record.key not in live_keys and (record.namespace, record.pod_name, record.container) not in unreadable:
                self._registry.unregister(record.key)
        return True
