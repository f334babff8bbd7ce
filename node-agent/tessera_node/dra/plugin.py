"""The DRA kubelet plugin's supervisor: its two sockets, prepare/unprepare with their side effects
(CDI spec, the agent's container registry, the checkpoint), and the node's ResourceSlice.

Prepare of a claim, in this order, each step idempotent: read the claim (the allocation and the
pods it is reserved for), work out shares and containers (`core`), write the CDI spec, register
the containers with the agent, save the checkpoint, answer. A plugin killed midway has not
answered, so kubelet calls prepare again, which redoes every step; one killed after the checkpoint
answers a repeated prepare from the checkpoint. Unprepare removes the CDI spec, the registry
records and the checkpoint entry; unpreparing a claim it does not know succeeds (kubelet retries
unprepare until it succeeds, and it may not have seen an earlier success). On start the plugin
loads the checkpoint, rewrites any missing CDI spec and restores missing registry records (the
agent rebuilds a lost registry from pods' `tessera.dev/allocation` annotations, which DRA pods do
not carry), then serves.

Only shared pools: a node whose `tessera.dev/pool-kind` is another kind publishes no devices.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tessera.kube.api import KubeApi, KubeApiError, NotFound
from tessera.model.contract import DRA_DRIVER, LABEL_POOL_KIND, NodeGpu
from tessera.model.pool_policy import DEFAULT_POOL_POLICY, PoolPolicy, read_pool_policy
from tessera.model.pools_file import PoolsFile
from tessera_node.dra.cdi import CdiSettings, CdiSpecs, claim_edits
from tessera_node.dra.checkpoint import Checkpoint
from tessera_node.dra.core import ClaimError, ClaimRef, PreparedClaim, PreparedSet, allocated_devices, consumers, merge_shares, reserving_pod_uids
from tessera_node.dra.registration import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR, RegistrationServicer, RegistrationStatus, plugin_socket, registration_socket
from tessera_node.dra.server import DeviceOut, PrepareOutcome, RpcCounters, UnixServer, add_dra_services, request_names
from tessera_node.dra.slices import SlicePublisher
from tessera_node.dra.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from tessera_node.gpu.backend import GpuBackend, MigMode
from tessera_node.registry import ContainerRegistry

log = logging.getLogger("tessera.dra")


@dataclass(frozen=True)
class DraPluginSettings:
    """node_name: this node (the slice's pool and nodeName).
    registry_dir: kubelet's plugin watcher directory (default /var/lib/kubelet/plugins_registry).
    plugins_dir: parent of the plugin's own directory, `<plugins_dir>/<driver>/dra.sock` (default
        /var/lib/kubelet/plugins).
    state_dir: the agent's state dir: the container registry and the checkpoint (default
        /var/lib/tessera/agent, as the device plugin).
    pools_file: the mounted tessera-pools ConfigMap; None: node labels only.
    node_poll_s: how often the node's labels and the pools file are read again and the slice
        republished (default 10 s).
    socket_check_s: how often the sockets are checked, a removed one is served again, and the
        slice's device order follows claims prepared or unprepared since (0.5 s)."""

    node_name: str
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    state_dir: Path = Path("/var/lib/tessera/agent")
    cdi: CdiSettings = field(default_factory=CdiSettings)
    pools_file: Path | None = None
    node_poll_s: float = 10.0
    socket_check_s: float = 0.5

    @property
    def dra_socket(self) -> Path:
        return plugin_socket(self.plugins_dir, DRA_DRIVER)

    @property
    def registration_socket(self) -> Path:
        return registration_socket(self.registry_dir, DRA_DRIVER)


@dataclass(frozen=True)
class Ready:
    dra_socket: Path
    registration_socket: Path
    gpus: tuple[str, ...]

    def line(self) -> str:
        models = ", ".join(f"{n} x {m}" for m, n in sorted(Counter(self.gpus).items())) or "no GPUs"
        return f"ready: DRA driver {DRA_DRIVER} serving {models} on {self.dra_socket}, registered with kubelet through {self.registration_socket}"


def gpus_from_backend(backend: GpuBackend) -> list[NodeGpu]:
    """Every GPU not in MIG mode (MIG-enabled GPUs are NVIDIA's to give out)."""
    return [NodeGpu(g.index, g.uuid, g.model, g.memory_mib, True, g.sm_count) for g in backend.list_gpus() if g.mig_mode is not MigMode.ENABLED]


class DraPlugin:
    def __init__(
        self,
        settings: DraPluginSettings,
        backend: GpuBackend,
        kube: KubeApi,
        registry: ContainerRegistry,
        *,
        on_ready: Callable[[Ready], None] | None = None,
    ) -> None:
        self.settings = settings
        self._backend = backend
        self._kube = kube
        self._registry = registry
        self._on_ready = on_ready or (lambda ready: log.info("%s", ready.line()))
        self._lock = threading.RLock()
        self._checkpoint = Checkpoint(settings.state_dir)
        self._prepared = PreparedSet(self._checkpoint.load())
        self._cdi = CdiSpecs(settings.cdi.cdi_dir)
        self._pools = PoolsFile(settings.pools_file)
        self._labels: Mapping[str, str] = {}
        self.policy: PoolPolicy = DEFAULT_POOL_POLICY
        self.gpus: list[NodeGpu] = []
        self.counters = RpcCounters()
        self._slices = SlicePublisher(kube, settings.node_name)
        self._registration = RegistrationServicer(DRA_DRIVER, settings.dra_socket, self._on_status)
        self._dra_server = UnixServer(settings.dra_socket, lambda server: add_dra_services(server, self, self.counters))
        self._reg_server = UnixServer(settings.registration_socket, lambda server: reg_grpc.add_RegistrationServicer_to_server(self._registration, server))
        self._ready_sent = False
        self._refusal_logged = False  # the "not a shared pool" warning, once per episode
        # a claim was prepared or unprepared: the run loop lists the slice's devices again in
        # the pool's placement order (set under the lock, read without: a late read costs a tick)
        self._usage_changed = False

    # --- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        """Read the GPUs and the node, and restore the prepared claims: ready to prepare."""
        self._backend.open()
        self.gpus = gpus_from_backend(self._backend)
        self.refresh_node()
        self.restore()

    def start(self) -> None:
        """`open`, then serve both sockets and publish the slice."""
        self.open()
        self._dra_server.start()  # the endpoint first: kubelet dials it right after GetInfo
        self._reg_server.start()
        self.publish()

    def stop(self) -> None:
        self._reg_server.stop()
        self._dra_server.stop()
        self._backend.close()

    def run(self, stop: threading.Event) -> None:
        self.start()
        try:
            next_poll = time.monotonic() + self.settings.node_poll_s
            while not stop.wait(self.settings.socket_check_s):
                if not (self._dra_server.serving and self._reg_server.serving):
                    log.warning("a socket of the DRA plugin was removed; serving again")
                    self._dra_server.start()
                    self._reg_server.start()
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + self.settings.node_poll_s
                    self.refresh_node()
                    self.publish()
                elif self._usage_changed:
                    self.publish()
        finally:
            self.stop()

    def _on_status(self, status: RegistrationStatus) -> None:
        if status.registered and not self._ready_sent:
            self._ready_sent = True
            self._on_ready(Ready(self.settings.dra_socket, self.settings.registration_socket, tuple(g.model for g in self.gpus)))

    # --- node, policy, slice ---------------------------------------------------------------------
    def refresh_node(self) -> None:
        try:
            node = self._kube.get_node(self.settings.node_name)
        except KubeApiError as exc:
            log.warning("cannot read node %s: %s; keeping the pool policy as it was", self.settings.node_name, exc)
            return
        labels = dict((node.get("metadata") or {}).get("labels") or {})
        reading = read_pool_policy(labels, self._pools.document())
        for problem in reading.problems:
            log.warning("pool policy: ignoring %s", problem)
        with self._lock:
            self._labels = labels
            self.policy = reading.policy

    @property
    def serves_pool(self) -> bool:
        """Only shared pools go through this plugin; an unlabelled node (a demo) counts as shared."""
        return self._labels.get(LABEL_POOL_KIND, "shared") == "shared"

    def publish(self) -> None:
        with self._lock:
            serves = self.serves_pool
            gpus = self.gpus if serves else []
            policy, labels = self.policy, dict(self._labels)
            used = self.used_cores()
            self._usage_changed = False
        if not serves and not self._refusal_logged:
            log.warning("node %s is in a %s pool: the DRA plugin serves shared pools only and publishes no devices", self.settings.node_name, labels.get(LABEL_POOL_KIND))
        self._refusal_logged = not serves
        self._slices.publish(gpus, policy, labels, used)

    def used_cores(self) -> dict[int, int]:
        """Per GPU index, the cores the prepared claims hold (the slice's device order)."""
        with self._lock:
            used: dict[int, int] = {}
            for prepared in self._prepared.all():
                for device in prepared.devices:
                    used[device.share.index] = used.get(device.share.index, 0) + device.share.core
            return used

    # --- restart ---------------------------------------------------------------------------------
    def restore(self) -> None:
        """After a restart: every checkpointed claim has its CDI spec and its registry records."""
        with self._lock:
            registered = self._registry.snapshot()
            missing = []
            for prepared in self._prepared.all():
                if self._cdi.read(prepared.claim.uid) is None:
                    self._write_cdi(prepared.claim, prepared)
                missing += [r for r in prepared.containers if r.key not in registered]
            if missing:
                self._registry.register_all(missing)
            if self._prepared.all():
                log.info("restored %d prepared claims from %s", len(self._prepared.all()), self._checkpoint.path)

    # --- the two RPCs (ClaimHandler) -------------------------------------------------------------
    def prepare(self, claim: ClaimRef) -> PrepareOutcome:
        problems = claim.problems()
        if problems:
            return PrepareOutcome(error=f"claim {claim}: {'; '.join(problems)}")
        with self._lock:
            done = self._prepared.get(claim.uid)
            if done is not None:
                if self._cdi.read(claim.uid) is None:
                    self._write_cdi(claim, done)
                return _outcome(done)
            try:
                prepared = self._prepare_new(claim)
            except ClaimError as exc:
                return PrepareOutcome(error=str(exc))
            return _outcome(prepared)

    def _prepare_new(self, claim: ClaimRef) -> PreparedClaim:
        try:
            body = self._kube.get_resource_claim(claim.namespace, claim.name)
        except NotFound:
            raise ClaimError(f"claim {claim}: no such ResourceClaim") from None
        except KubeApiError as exc:
            raise ClaimError(f"claim {claim}: cannot read it from the API server: {exc}") from None
        if not self.serves_pool:
            raise ClaimError(f"claim {claim}: node {self.settings.node_name} is in a {self._labels.get(LABEL_POOL_KIND)} pool; the Tessera DRA driver serves shared pools only")
        devices = allocated_devices(claim, body, pool=self.settings.node_name, gpus=self.gpus)
        pods = self._reserving_pods(claim, body)
        records = consumers(claim, devices, pods, self.policy)
        for record in records:
            holder = self._prepared.holder_of(record.key, other_than=claim.uid)
            if holder is not None:
                raise ClaimError(
                    f"claim {claim}: container {record.container} of pod {record.namespace}/{record.pod_name} already uses claim "
                    f"{holder.claim.namespace}/{holder.claim.name}; one {DRA_DRIVER} claim per container"
                )
        prepared = PreparedClaim(claim, devices, "", tuple(records))
        prepared = PreparedClaim(claim, devices, self._write_cdi(claim, prepared), tuple(records))
        if records:
            self._registry.register_all(records)
        self._prepared.add(prepared)
        self._checkpoint.save(self._prepared.all())
        self._usage_changed = True
        log.info("prepared claim %s: %s for %s", claim, ", ".join(f"{d.device} {d.share.core}%/{d.share.memory_mib}MiB" for d in devices),
                 ", ".join(f"{r.pod_name}/{r.container}" for r in records) or "no container yet")
        return prepared

    def _reserving_pods(self, claim: ClaimRef, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        pods = []
        for name, uid in reserving_pod_uids(body):
            try:
                pod = self._kube.get_pod(claim.namespace, name)
            except KubeApiError as exc:
                raise ClaimError(f"claim {claim}: cannot read pod {claim.namespace}/{name} it is reserved for: {exc}") from None
            if str((pod.get("metadata") or {}).get("uid", "")) != uid:
                raise ClaimError(f"claim {claim}: reserved for pod {claim.namespace}/{name} uid {uid}, but that pod is now another one")
            pods.append(pod)
        return pods

    def _write_cdi(self, claim: ClaimRef, prepared: PreparedClaim) -> str:
        edits = claim_edits(merge_shares(d.share for d in prepared.devices), self.gpus, self.policy, self.settings.cdi, claim=f"{claim.namespace}/{claim.name}")
        return self._cdi.write(claim.uid, edits)

    def unprepare(self, claim: ClaimRef) -> str:
        with self._lock:
            prepared = self._prepared.remove(claim.uid)
            self._cdi.remove(claim.uid)
            if prepared is None:
                return ""
            for record in prepared.containers:
                if self._prepared.holder_of(record.key, other_than=claim.uid) is None:
                    self._registry.unregister(record.key)
            self._checkpoint.save(self._prepared.all())
            self._usage_changed = True
            log.info("unprepared claim %s", claim)
            return ""

    def prepared_claims(self) -> list[PreparedClaim]:
        with self._lock:
            return self._prepared.all()


def _outcome(prepared: PreparedClaim) -> PrepareOutcome:
    """One CDI device carries the whole claim's edits. It goes on the first device, with no
    request names (= every request of the claim), so each container that uses the claim gets it
    exactly once; the other devices name their request and carry no CDI id (kubelet's
    `cdiDevicesAsList` would otherwise list the id twice for a container of two requests)."""
    devices = tuple(
        DeviceOut(() if i == 0 else request_names((d.request,)), d.pool, d.device, (prepared.cdi_device_id,) if i == 0 else ())
        for i, d in enumerate(prepared.devices)
    )
    return PrepareOutcome(devices)
