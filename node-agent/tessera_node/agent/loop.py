"""The node agent's main loop: sample the GPUs, decide, act, publish metrics.

Two cadences (see `AgentSettings`): every tick (default 100 ms) the fast path samples GPU
processes, attributes the busy ones to containers, runs the online/offline and burst-share
controllers and renews freeze leases, because pausing offline work is latency-bound. Every
`slow_every` ticks (default 1 s) the slow path attributes every process, checks memory limits,
supervises MPS daemons, polls Xid events, publishes the metrics view and, less often, learns
container ids from the pods.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tessera.kube.api import KubeApi, KubeApiError
from tessera_node.agent.attribution import Attribution, ProcessAttributor
from tessera_node.agent.burst import BurstController
from tessera_node.agent.cgroups import CgroupLocator
from tessera_node.agent.colocation import REASON_PAUSED, REASON_RESUMED, ColocationController
from tessera_node.agent.events import EventSink, EventType
from tessera_node.agent.freezer import Freezer, LeaseBook
from tessera_node.agent.index import RegistryView
from tessera_node.agent.memory import REASON_MEMORY_EXCEEDED, REASON_MEMORY_WARNING, MemoryAction, MemoryGuard, ProcessKiller
from tessera_node.agent.metrics import AgentView, ContainerGpuRow, GpuRow, LatencyCounts, ViewBox
from tessera_node.agent.mps import MpsSupervisor, desired_limits
from tessera_node.agent.pausing import PauseCause, PauseManager
from tessera_node.registry import AppClass, ContainerKey, ContainerRegistry, RegisteredContainer, RegistryCorrupt, container_ids_from_status, containers_from_pods
from tessera.model.pool_policy import PoolPolicy, read_pool_policy
from tessera.model.pools_file import PoolsFile
from tessera_node.agent.settings import AgentSettings
from tessera_node.agent.wake import OnlineWakeDetector
from tessera_node.gpu.health import HealthSettings, HealthTracker
from tessera_node.gpu.backend import GpuBackend, GpuBackendError, GpuIndex, GpuInfo, ProcessSample

_log = logging.getLogger(__name__)


@dataclass
class AgentDeps:
    """Everything the agent talks to, so tests and `--simulate` swap in fakes."""

    backend: GpuBackend
    registry: ContainerRegistry
    locator: CgroupLocator
    killer: ProcessKiller
    kube: KubeApi | None = None
    mps: MpsSupervisor | None = None
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time


@dataclass
class _Counters:
    memory_kills: dict[tuple[ContainerKey, str], int] = field(default_factory=dict)
    memory_warnings: dict[tuple[ContainerKey, str], int] = field(default_factory=dict)
    xids: dict[int, int] = field(default_factory=dict)
    ticks: int = 0
    tick_seconds: float = 0.0
    tick_errors: int = 0
    pause_latency: LatencyCounts = field(default_factory=LatencyCounts)


class Agent:
    def __init__(self, settings: AgentSettings, deps: AgentDeps) -> None:
        self.settings = settings
        self.deps = deps
        self.freezer = Freezer(deps.locator.version)
        self.leases = LeaseBook(settings.state_dir)
        self.pauses = PauseManager(deps.locator, self.freezer, self.leases, settings.lease_ttl_s, settings.freeze_confirm_timeout_s)
        self.colocation = ColocationController()
        self.wake = OnlineWakeDetector(settings.online_wake)
        self.burst = BurstController()
        self.memory = MemoryGuard(grace_mib=settings.memory_grace_mib)
        self.attributor = ProcessAttributor(deps.locator)
        self.events = EventSink(deps.kube, settings.node_name)
        self.view = ViewBox()
        self.counters = _Counters()
        self.node_policy: PoolPolicy | None = None  # from the pools file and node labels when a KubeApi is given
        self._pools = PoolsFile(settings.pools_file)
        self._policy_problems: tuple[str, ...] = ()
        self._gpus: list[GpuInfo] = []
        self._uuid_of: dict[int, str] = {}
        self._health = HealthTracker(HealthSettings(), [])
        self._attribution = Attribution({})
        self._last_ambiguous_refresh: float | None = None
        self._held_back: set[tuple[ContainerKey, str]] = set()  # memory checks waiting for ids, as logged
        self._view_cache = RegistryView.of([])
        self._containers_stamp: object = object()
        self._samples: list[ProcessSample] = []
        self._last_throttled: set[ContainerKey] = set()
        self._last_applied_view: RegistryView | None = None
        self._watched: tuple[RegistryView | None, dict[ContainerKey, tuple[Path, tuple[str, ...]]]] = (None, {})

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> list[str]:
        """Open the GPU backend, learn the pods, and thaw whatever a previous agent left frozen."""
        self.deps.backend.open()
        self.set_gpus(self.deps.backend.list_gpus())
        self.refresh_from_pods()
        offline = [c for c in self.containers().values() if c.app_class is AppClass.OFFLINE or c.policy.sharing == "burst-share"]
        extra = [d for c in offline if (d := self.deps.locator.container_dir(c.pod_uid, c.container_id)) is not None]
        thawed = self.pauses.thaw_everything(self.deps.monotonic(), extra)
        for path in thawed:
            _log.info("thawed %s left frozen by a previous agent", path)
        self.publish()
        return thawed

    def set_gpus(self, gpus: list[GpuInfo]) -> None:
        self._gpus = gpus
        self._uuid_of = {g.index: g.uuid for g in gpus}
        # the device plugin's health policy, so the metric and the advertised devices agree
        self._health = HealthTracker(HealthSettings(), [g.index for g in gpus])

    def shutdown(self) -> list[str]:
        thawed = self.pauses.thaw_everything(self.deps.monotonic())
        if self.deps.mps is not None:
            self.deps.mps.stop_all()
        self.deps.backend.close()
        return thawed

    def run(self, stop: threading.Event) -> None:
        """Tick until `stop` is set; ticks are scheduled on a fixed grid (no drift)."""
        interval = self.settings.poll_interval_s
        next_at = self.deps.monotonic()
        while not stop.is_set():
            try:
                self.tick()
            except (OSError, RegistryCorrupt, GpuBackendError) as exc:
                # A transient failure (a cgroup file vanishing mid-write, a registry being
                # replaced, the driver busy) must not kill the loop: the next tick retries.
                self.counters.tick_errors += 1
                _log.error("agent tick failed (%d so far): %s", self.counters.tick_errors, exc)
            next_at += interval
            delay = next_at - self.deps.monotonic()
            if delay < 0:  # overran: skip missed slots instead of bursting to catch up
                next_at = self.deps.monotonic()
                delay = 0
            stop.wait(delay)

    # --- one iteration -------------------------------------------------------------------------
    def containers(self) -> RegistryView:
        """Registry records with the node's pool policy applied, indexed; rebuilt only when the
        registry file or the node policy changed."""
        stamp = (self.deps.registry.stamp, self.node_policy)
        if stamp != self._containers_stamp:
            records = self.deps.registry.snapshot()
            if self.node_policy is not None:
                records = {k: replace(c, policy=self.node_policy) for k, c in records.items()}
            self._view_cache = RegistryView.of(records)
            self._containers_stamp = stamp
        return self._view_cache

    def tick(self) -> None:
        started = time.perf_counter()
        now = self.deps.monotonic()
        view = self.containers()
        try:
            samples = self.deps.backend.processes()
        except GpuBackendError as exc:
            _log.warning("GPU sampling failed: %s", exc)
            samples = []
        self._samples = samples
        # Fast path: only processes above the activity threshold, only online and burst-share
        # owners matter for pausing decisions; full attribution waits for the slow path.
        threshold = self.settings.activity_threshold_pct
        active_online: dict[str, list[ContainerKey]] = {}
        active_burst: list[tuple[ContainerKey, str]] = []
        if view.colocated_offline or view.burst:
            uuid_of = self._uuid_of
            owners = self.attributor.owners_for(view)
            online_keys, burst = view.online_keys, view.burst
            for sample in samples:
                if sample.sm_utilisation_pct < threshold:
                    continue
                owner = owners.get((sample.pid, sample.gpu))
                if owner is None:
                    uuid = uuid_of.get(sample.gpu)
                    owner = self.attributor.owner(sample.pid, sample.gpu, uuid, view) if uuid else None
                    if owner is None:
                        continue
                if owner in online_keys:
                    active_online.setdefault(uuid_of[sample.gpu], []).append(owner)
                elif owner in burst:
                    active_burst.append((owner, uuid_of[sample.gpu]))
        waking = self._online_waking(now, view, active_online) if view.colocated_offline else {}
        plan = self.colocation.step(now, view, active_online, waking)
        throttled = self.burst.step(now, view, active_burst)
        applied_at = now
        if not plan.empty or throttled != self._last_throttled or view is not self._last_applied_view:
            # Only when a decision changed: rebuilding the wanted set costs O(frozen containers).
            wanted: dict[ContainerKey, set[PauseCause]] = {k: {PauseCause.ONLINE_ACTIVE} for k in self.colocation.frozen}
            for key in throttled:
                wanted.setdefault(key, set()).add(PauseCause.BURST_THROTTLE)
            self.pauses.apply(now, self.deps.wall(), wanted, view.records)
            applied_at = self.deps.monotonic()
            for key in [k for k in self.colocation.frozen if k not in self.pauses.paused]:
                self.colocation.forget(key)
            self._last_throttled, self._last_applied_view = throttled, view
        self.pauses.renew_leases(self.deps.wall())
        for order in plan.freeze:
            if order.container.key in self.pauses.paused:
                # from the sample that saw online work active to the offline container frozen
                self.counters.pause_latency = self.counters.pause_latency.observe(applied_at - now)
                who = ", ".join(order.online) or "an online container"
                self.events.emit(order.container, REASON_PAUSED, f"paused: online work on GPU {order.gpu_uuid} is active ({who})", EventType.NORMAL)
        for thaw in plan.thaw:
            if thaw.container is not None:
                self.events.emit(thaw.container, REASON_RESUMED, f"resumed: {thaw.reason}", EventType.NORMAL)
        self.counters.ticks += 1
        if self.counters.ticks % self.settings.slow_every == 0:
            self.slow_tick()
        self.counters.tick_seconds += time.perf_counter() - started

    def _online_waking(self, now: float, view: RegistryView, active_online: dict[str, list[ContainerKey]]) -> dict[str, list[ContainerKey]]:
        """GPU uuid -> online containers whose CPU woke and NVML has not confirmed (`wake.py`)."""
        if not self.settings.online_wake.enabled:
            return {}
        watched = self._watched_online(view)
        usage = {key: self.deps.locator.cpu_usage_usec(cgroup) for key, (cgroup, _) in watched.items()}
        confirmed = {key for keys in active_online.values() for key in keys}
        out: dict[str, list[ContainerKey]] = {}
        for key in self.wake.observe(now, usage, confirmed):
            for uuid in watched[key][1]:
                out.setdefault(uuid, []).append(key)
        return out

    def _watched_online(self, view: RegistryView) -> dict[ContainerKey, tuple[Path, tuple[str, ...]]]:
        """Online containers sharing a GPU with pausable offline work, with their cgroups and those
        GPUs; found once per registry change (a container without a known id is not watched)."""
        if self._watched[0] is view:
            return self._watched[1]
        offline_gpus = {u for c in view.colocated_offline for u in c.gpu_uuids}
        watched: dict[ContainerKey, tuple[Path, tuple[str, ...]]] = {}
        for key in view.online_keys:
            c = view.records[key]
            shared = tuple(u for u in c.gpu_uuids if u in offline_gpus)
            if not shared or c.container_id is None:
                continue
            cgroup = self.deps.locator.container_dir(c.pod_uid, c.container_id)
            if cgroup is not None:
                watched[key] = (cgroup, shared)
        self._watched = (view, watched)
        return watched

    def slow_tick(self) -> None:
        self._watched = (None, {})  # find cgroups of online containers that were not there yet
        containers = self.containers()
        attribution = self.attributor.attribute(self._samples, self._gpus, containers)
        refreshed = False
        if self._ids_would_settle(attribution, containers):
            # Processes of a pod whose containers' ids are unknown cannot be told apart: learn
            # the ids now instead of at the next periodic refresh (up to pods_refresh_every
            # ticks away), and attribute again with them.
            self._last_ambiguous_refresh = self.deps.monotonic()
            self.refresh_from_pods()
            refreshed = True
            if self.containers() is not containers:
                containers = self.containers()
                attribution = self.attributor.attribute(self._samples, self._gpus, containers)
        self._attribution = attribution
        self._poll_health()
        self._log_held_back(attribution)
        self._enforce_memory(containers)
        if self.deps.mps is not None and self.settings.mps_enabled:
            for line in self.deps.mps.reconcile(desired_limits(containers.values(), {g.uuid: g.sm_count for g in self._gpus})):
                _log.info("%s", line)
        if not refreshed and self.counters.ticks % self.settings.pods_refresh_every == 0:
            self.refresh_from_pods()
        if self.view.wanted(self.deps.monotonic()):
            self.publish()

    # --- slow-path parts -----------------------------------------------------------------------
    def _ids_would_settle(self, attribution: Attribution, containers: RegistryView) -> bool:
        """A pod-status read could settle an ambiguous attribution (some candidate's runtime id
        is still unknown) and the last such read is at least `ambiguous_refresh_interval_s` old."""
        if self.deps.kube is None or not attribution.ambiguous:
            return False
        last = self._last_ambiguous_refresh
        if last is not None and self.deps.monotonic() - last < self.settings.ambiguous_refresh_interval_s:
            return False
        records = containers.records
        return any(key in records and records[key].container_id is None for key, _ in attribution.ambiguous)

    def _log_held_back(self, attribution: Attribution) -> None:
        """One log line when a container's memory check starts waiting for ids, one when it resumes."""
        held = set(attribution.ambiguous)
        for key, uuid in sorted(held - self._held_back):
            _log.warning(
                "GPU processes %s on %s may belong to container %s of pod %s or to a sibling: its runtime id is "
                "not known yet, so its GPU memory limit is not enforced until it is",
                list(attribution.ambiguous[(key, uuid)]), uuid, key.container, key.pod_uid,
            )
        for key, uuid in sorted(self._held_back - held):
            _log.info("container %s of pod %s on %s: GPU processes attributed, memory limit enforced again", key.container, key.pod_uid, uuid)
        self._held_back = held

    def refresh_from_pods(self) -> None:
        kube = self.deps.kube
        if kube is None:
            return
        try:
            node = kube.get_node(self.settings.node_name)
            labels = (node.get("metadata") or {}).get("labels") or {}
            reading = read_pool_policy(labels, self._pools.document(), fallback=self.settings.pool_policy)
            if reading.problems != self._policy_problems:
                self._policy_problems = reading.problems
                for problem in reading.problems:
                    _log.warning("pool policy: ignoring %s", problem)
            self.node_policy = reading.policy
            pods = kube.list_pods(node_name=self.settings.node_name)
        except (KubeApiError, OSError) as exc:
            _log.warning("cannot list pods on %s: %s; keeping the registry as is", self.settings.node_name, exc)
            return
        if self.deps.registry.stamp is None:
            # No registry on disk (first start, or the state dir was lost): rebuild it from the
            # pods' allocation records. Afterwards the device plugin owns membership (it
            # re-derives it from PodResources); the agent only learns runtime container ids.
            self.deps.registry.replace_all(containers_from_pods(pods, self.settings.node_name, self.node_policy))
        ids = {str((p.get("metadata") or {}).get("uid", "")): container_ids_from_status(p) for p in pods}
        for key, record in self.deps.registry.snapshot().items():
            cid = ids.get(key.pod_uid, {}).get(key.container)
            if cid is not None and cid != record.container_id:
                self.deps.registry.set_container_id(key, cid)

    def _poll_health(self) -> None:
        now = self.deps.monotonic()
        try:
            events = self.deps.backend.poll_xid_events(0)
            for event in events:
                self.counters.xids[event.gpu] = self.counters.xids.get(event.gpu, 0) + 1
            self._health.on_xids(events, now)
            backend = self.deps.backend
            self._health.on_probe(lambda index: backend.is_responsive(GpuIndex(index)), now)
        except GpuBackendError as exc:
            _log.warning("GPU health poll failed: %s", exc)

    def _enforce_memory(self, containers: RegistryView) -> None:
        attribution = self._attribution
        for v in self.memory.check(containers.values(), attribution.usage, pending=attribution.ambiguous):
            slot = (v.container.key, v.gpu_uuid)
            if v.action is MemoryAction.KILL:
                for pid in v.pids:
                    self.deps.killer.kill(pid)
                self.counters.memory_kills[slot] = self.counters.memory_kills.get(slot, 0) + 1
                self.events.emit(v.container, REASON_MEMORY_EXCEEDED, v.message, EventType.WARNING)
            elif v.new_episode:
                self.counters.memory_warnings[slot] = self.counters.memory_warnings.get(slot, 0) + 1
                self.events.emit(v.container, REASON_MEMORY_WARNING, v.message, EventType.WARNING)

    def publish(self) -> None:
        self.view.publish(self.build_view(), self.deps.monotonic())

    def build_view(self) -> AgentView:
        containers = self.containers()
        now = self.deps.monotonic()
        frozen_s = self.pauses.frozen_seconds_now(now)
        rows: list[ContainerGpuRow] = []
        core_by_gpu: dict[str, int] = {}
        mem_by_gpu: dict[str, int] = {}
        for c in containers.values():
            for share in c.shares:
                core_by_gpu[share.uuid] = core_by_gpu.get(share.uuid, 0) + share.core
                mem_by_gpu[share.uuid] = mem_by_gpu.get(share.uuid, 0) + share.memory_mib
                slot = (c.key, share.uuid)
                use = self._attribution.usage.get(slot)
                rows.append(
                    ContainerGpuRow(
                        namespace=c.namespace, pod=c.pod_name, container=c.container, gpu_uuid=share.uuid,
                        app_class=c.app_class.value if c.app_class else "",
                        memory_used_mib=use.memory_mib if use else 0, memory_limit_mib=share.memory_mib,
                        core_allocated_pct=share.core, sm_utilisation_pct=use.sm_pct if use else 0,
                        frozen=c.key in self.pauses.paused, frozen_seconds=frozen_s.get(c.key, 0.0),
                        throttle_events=self.burst.throttle_events.get(c.key, 0),
                        memory_kills=self.counters.memory_kills.get(slot, 0),
                        memory_warnings=self.counters.memory_warnings.get(slot, 0),
                        freezes=self.pauses.freeze_count.get(c.key, 0),
                        attribution_pending=self._attribution.pending(c.key, share.uuid),
                    )
                )
        try:
            util = {u.gpu: u for u in self.deps.backend.utilisation()}
        except GpuBackendError:
            util = {}
        mps_running = self.deps.mps.running() if self.deps.mps else {}
        mps_restarts = self.deps.mps.restarts if self.deps.mps else {}
        gpus = tuple(
            GpuRow(
                uuid=g.uuid, index=g.index, model=g.model, memory_total_mib=g.memory_mib,
                core_allocated_pct=core_by_gpu.get(g.uuid, 0), memory_allocated_mib=mem_by_gpu.get(g.uuid, 0),
                utilisation_pct=util[g.index].gpu_pct if g.index in util else 0,
                memory_used_mib=util[g.index].used_memory_mib if g.index in util else 0,
                healthy=self._health.health().get(g.index, True), xid_errors=self.counters.xids.get(g.index, 0),
                mps_daemon_running=g.uuid in mps_running, mps_restarts=mps_restarts.get(g.uuid, 0),
            )
            for g in self._gpus
        )
        return AgentView(
            tuple(rows), gpus, self.counters.ticks, self.counters.tick_seconds, self.events.failures,
            ambiguous_processes=len(self._attribution.ambiguous_pids()), pause_latency=self.counters.pause_latency,
            online_wakes=(("wake", self.wake.counts.wakes), ("confirmed", self.wake.counts.confirmed), ("unconfirmed", self.wake.counts.unconfirmed)),
        )
