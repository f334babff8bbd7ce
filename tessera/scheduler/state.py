"""The extender's cache: shared GPU nodes and the pods holding GPU capacity on them.

It wraps `tessera.alloc.Cluster` (the inventory, reservations and placement policy) with what
only the extender knows: which reservations are bound, which are in the middle of a bind, and
which were rebuilt from annotations after a restart. One lock guards everything; the policy
code is pure and not thread-safe.

Sources of truth, in order: a bind in flight in this process (it owns its pod), then the pod's
`tessera.dev/allocation` annotation as the API server reports it (watch events), then the TTL:
a pod annotated but still unbound after `assume_ttl_s` lost its bind (kube-scheduler gave up or
the extender died) and its reservation is released.
"""
from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from pathlib import Path
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from tessera.alloc import Cluster, Evaluation, FitFailure, InvalidRequest, NodeState, Placement, PodRequest, ReserveConflict
from tessera.alloc import node_state_from_k8s, pod_request_from_k8s
from tessera.alloc.model import MILLI_PER_GPU, PodUid
from tessera.model.contract import ANNOTATION_ALLOCATION, LABEL_POOL, LABEL_POOL_KIND, Allocation
from tessera.kube.api import KubeObject
from tessera.model.pools_file import PoolsFileWatch
from tessera.scheduler.evaluation_views import EvaluationViews
from tessera.scheduler.metrics import ExtenderMetrics
from tessera.scheduler.pool_settings import PoolSettings
from tessera.scheduler.pool_usage import PoolUsageMeter

log = logging.getLogger(__name__)

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class StateSettings:
    """How the cache behaves.

    track_host_resources: default False: in a cluster kube-scheduler's own NodeResourcesFit checks
        CPU and memory, and pods not scheduled by us use them too. True in --simulate, where
        nobody else checks them.
    assume_ttl_s: default 300 s: an annotated pod still unbound this long after its assume time
        lost its bind (kube-scheduler's bind timeout is far shorter); its capacity is released.
    seen_pods_limit: default 100 000: pods remembered as already fed into the workload mix, so a
        pod retried by kube-scheduler counts once (bounded memory).
    """

    track_host_resources: bool = False
    assume_ttl_s: float = 300.0
    seen_pods_limit: int = 100_000


class Holding(Enum):
    IN_FLIGHT = "in-flight"  # a bind in this process reserved it and has not finished
    ASSUMED = "assumed"  # annotated, not bound (after a restart or a failed bind)
    BOUND = "bound"


@dataclass
class PodEntry:
    namespace: str
    name: str
    node: str
    holding: Holding
    assumed_at: float  # epoch seconds
    priority: int = 0  # spec.priority: who may preempt it
    started_at: float = math.inf  # status.startTime, epoch seconds; inf until kubelet starts it


@dataclass(frozen=True)
class HeldPod:
    """A pod holding GPU capacity on a node, as preemption sees it."""

    uid: str
    priority: int
    started_at: float
    gpus: frozenset[int]
    bound: bool  # bound pods are in kube-scheduler's snapshot of the node; others may not be


@dataclass(frozen=True)
class Expired:
    namespace: str
    name: str
    uid: str
    node: str  # the node the expired record named (only a record for this node is stripped)


def parse_rfc3339(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0  # unreadable assume time: treat as long expired


def pod_priority(pod: KubeObject) -> int:
    """kube-scheduler's `corev1helpers.PodPriority`: `spec.priority` (the API server's Priority
    admission resolves it from priorityClassName), 0 when unset."""
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def pod_started_at(pod: KubeObject) -> float:
    """`status.startTime` in epoch seconds; inf while unset (kube-scheduler's
    `GetPodStartTime` then uses "now", later than any pod that started)."""
    text = (pod.get("status") or {}).get("startTime")
    return parse_rfc3339(text) if isinstance(text, str) and text else math.inf


def is_shared_gpu_node(node: KubeObject) -> bool:
    kind = ((node.get("metadata") or {}).get("labels") or {}).get(LABEL_POOL_KIND)
    return kind in (None, "shared")


class SchedulerState:
    def __init__(self, cluster: Cluster, settings: StateSettings, *, clock: Callable[[], float], pools_file: Path | None = None) -> None:
        """`pools_file`: the mounted pools document; its per-pool placement, sharing policy and
        shares per GPU apply to the pool's nodes (see `pool_settings`); None = node labels only."""
        self.cluster = cluster
        self.settings = settings
        self.lock = threading.RLock()
        self._clock = clock
        self._entries: dict[PodUid, PodEntry] = {}
        # pod uid -> assume time of a reservation the TTL released: a watch event delivered late
        # (written before the annotations were stripped) must not bring that reservation back
        self._expired: dict[PodUid, float] = {}
        self._node_fingerprints: dict[str, str] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.inconsistencies = 0  # records that could not be restored (should stay 0)
        self.views = EvaluationViews()  # every change of a node must be reported to it
        self.pool_settings = PoolSettings()
        self._pool_usage = PoolUsageMeter()
        self._pools_watch = PoolsFileWatch(pools_file) if pools_file is not None else None
        self._node_objects: dict[str, KubeObject] = {}  # shared nodes as last seen, re-applied on a pools edit
        self.refresh_pools()

    # --- pools file -----------------------------------------------------------------------------
    def refresh_pools(self) -> None:
        """Re-read the pools file if it may have changed; nodes of a pool whose settings changed are
        re-applied, which marks them changed for the evaluation caches."""
        if self._pools_watch is None:
            return
        with self.lock:
            document = self._pools_watch.poll()
            if document is None:
                return
            changed = self.pool_settings.load_file(document)
            if not changed:
                return
            for node in list(self._node_objects.values()):
                if ((node.get("metadata") or {}).get("labels") or {}).get(LABEL_POOL, "") in changed:
                    self.apply_node(node)

    # --- nodes ----------------------------------------------------------------------------------
    def apply_node(self, node: KubeObject) -> None:
        name = str(node["metadata"]["name"])
        try:
            state = node_state_from_k8s(node, track_host_resources=self.settings.track_host_resources) if is_shared_gpu_node(node) else None
        except InvalidRequest as exc:
            log.warning("ignoring node %s: %s", name, exc)
            state = None
        with self.lock:
            if state is None:
                self.remove_node(name)
                return
            self._node_objects[name] = node
            state.labels = self.pool_settings.effective_labels(name, state.labels)
            fingerprint = repr((state.gpus, state.labels, state.cpu_milli, state.memory_mib))
            if self._node_fingerprints.get(name) == fingerprint:
                return  # a heartbeat or status change that does not touch the inventory
            self._node_fingerprints[name] = fingerprint
            self._replace_inventory(state)

    def _replace_inventory(self, state: NodeState) -> None:
        self.views.touched(state.name)
        old = self.cluster.nodes.get(state.name)
        wanted_health = {g.index: g.healthy for g in state.gpus}
        if old is not None:
            # Health flips go through set_gpu_health: re-adding the node would drop the pods
            # still running on a GPU that just turned unhealthy (they keep using it).
            before = {(g.index, g.uuid): g.healthy for g in old.gpus}
            for g in state.gpus:
                g.healthy = before.get((g.index, g.uuid), g.healthy)
        if old is None or _inventory(old) != _inventory(state):
            for uid in self.cluster.add_node(state):
                entry = self._entries.pop(uid, None)
                self.inconsistencies += 1
                log.error("pod %s no longer fits node %s after an inventory change; its GPUs are not tracked", entry and entry.name, state.name)
        current = self.cluster.nodes[state.name]
        sm_counts = {g.index: g.sm_count for g in state.gpus}
        for g in current.gpus:
            g.sm_count = sm_counts.get(g.index, g.sm_count)  # not part of placement: no re-add needed
            healthy = wanted_health.get(g.index, g.healthy)
            if g.healthy != healthy:
                self.cluster.set_gpu_health(state.name, g.index, healthy)

    def remove_node(self, name: str) -> None:
        with self.lock:
            if name not in self.cluster.nodes and name not in self._node_fingerprints:
                return  # not a Tessera node (e.g. a CPU node's heartbeat): nothing changes
            self.views.touched(name)
            self._node_fingerprints.pop(name, None)
            self._node_objects.pop(name, None)
            self.pool_settings.forget_node(name)
            for uid in self.cluster.remove_node(name):
                self._entries.pop(uid, None)

    def replace_nodes(self, nodes: Iterable[KubeObject]) -> None:
        """After a (re)list: apply every node, forget the ones that are gone."""
        nodes = list(nodes)
        with self.lock:
            present = {str(n["metadata"]["name"]) for n in nodes}
            for name in list(self.cluster.nodes):
                if name not in present:
                    self.remove_node(name)
            for node in nodes:
                self.apply_node(node)

    # --- pods from the API ----------------------------------------------------------------------
    def apply_pod(self, pod: KubeObject) -> None:
        meta = pod.get("metadata") or {}
        uid = PodUid(str(meta.get("uid", "")))
        phase = (pod.get("status") or {}).get("phase")
        with self.lock:
            entry = self._entries.get(uid)
            if phase in _TERMINAL_PHASES:
                self._release(uid)
                self._expired.pop(uid, None)
                return
            if entry is not None and entry.holding is Holding.IN_FLIGHT:
                return  # the bind in flight owns this pod until it finishes
            text = (meta.get("annotations") or {}).get(ANNOTATION_ALLOCATION)
            if not text:
                return  # nothing recorded; an entry without a record is left to the TTL
            try:
                allocation = Allocation.from_json(text)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("pod %s/%s: unreadable %s: %s", meta.get("namespace"), meta.get("name"), ANNOTATION_ALLOCATION, exc)
                return
            bound_to = (pod.get("spec") or {}).get("nodeName")
            if bound_to and bound_to != allocation.node:
                log.warning("pod %s/%s is bound to %s but its allocation names %s", meta.get("namespace"), meta.get("name"), bound_to, allocation.node)
                self._release(uid)
                return
            if not bound_to and _same_reservation(self._expired.get(uid), allocation.assumed_at):
                return  # the record of a reservation that already expired, seen late
            self._expired.pop(uid, None)
            holding = Holding.BOUND if bound_to else Holding.ASSUMED
            self._restore(pod, uid, allocation, holding)

    def _restore(self, pod: KubeObject, uid: PodUid, allocation: Allocation, holding: Holding) -> None:
        entry = self._entries.get(uid)
        if entry is not None and entry.node == allocation.node and self.cluster.pod(uid) is not None:
            entry.holding = holding
            entry.priority = pod_priority(pod)
            entry.started_at = pod_started_at(pod)
            return
        self._release(uid)
        self.views.touched(allocation.node)
        try:
            request = pod_request_from_k8s(pod)
            self.cluster.restore(request, allocation)
        except (InvalidRequest, ReserveConflict) as exc:
            self.inconsistencies += 1
            log.error("cannot restore the allocation of pod %s: %s", uid, exc)
            return
        meta = pod["metadata"]
        self._entries[uid] = PodEntry(
            str(meta.get("namespace", "default")), str(meta.get("name", "")), allocation.node, holding, parse_rfc3339(allocation.assumed_at),
            pod_priority(pod), pod_started_at(pod),
        )

    def delete_pod(self, pod: KubeObject) -> None:
        uid = PodUid(str((pod.get("metadata") or {}).get("uid", "")))
        with self.lock:
            self._release(uid)
            self._expired.pop(uid, None)

    def replace_pods(self, pods: Iterable[KubeObject]) -> None:
        """After a (re)list: apply every pod, release the ones that are gone (except in flight)."""
        pods = list(pods)
        with self.lock:
            present = {str((p.get("metadata") or {}).get("uid", "")) for p in pods}
            for uid, entry in list(self._entries.items()):
                if uid not in present and entry.holding is not Holding.IN_FLIGHT:
                    self._release(uid)
            for pod in pods:
                self.apply_pod(pod)

    def _release(self, uid: PodUid) -> None:
        self._entries.pop(uid, None)
        placement = self.cluster.release(uid)
        if placement is not None:
            self.views.touched(placement.node)

    # --- scheduling -----------------------------------------------------------------------------
    def observe_once(self, request: PodRequest) -> None:
        """Feed a pod into the workload mix the first time it is seen (caller holds the lock)."""
        if request.uid in self._seen:
            return
        self._seen[request.uid] = None
        if len(self._seen) > self.settings.seen_pods_limit:
            self._seen.popitem(last=False)
        self.cluster.observe(request)  # may start a new epoch; the views notice it

    def evaluations(self, request: PodRequest, names: Iterable[str]) -> dict[str, Evaluation | FitFailure]:
        """The production policy's answer for every node in `names` (caller holds the lock)."""
        self.refresh_pools()
        return self.views.evaluations(request, names, self.cluster.policy().epoch, self.cluster.evaluate_many)

    def fits_without(self, request: PodRequest, node: str, victims: Iterable[str]) -> bool:
        """Whether `request` fits on `node` once `victims` (pod UIDs) are gone, by the production
        fit check; the state is left exactly as it was (caller holds the lock)."""
        return isinstance(self.cluster.evaluate_without(request, node, (PodUid(uid) for uid in victims)), Evaluation)

    def held_on(self, node: str) -> list[HeldPod]:
        """The pods holding GPU capacity on `node` (caller holds the lock)."""
        out = []
        for uid, entry in self._entries.items():
            if entry.node != node:
                continue
            placement = self.cluster.placement(uid)
            if placement is None or placement.node != node:
                continue
            out.append(HeldPod(uid, entry.priority, entry.started_at, placement.gpu_indices, entry.holding is Holding.BOUND))
        return out

    def held_node(self, uid: PodUid) -> str | None:
        """The node a pod already holds capacity on (its own share must not count against it)."""
        entry = self._entries.get(uid)
        return entry.node if entry is not None else None

    def reserve_for_bind(self, request: PodRequest, node: str, *, priority: int = 0) -> Placement | FitFailure:
        """Choose GPUs on `node` with the production policy and reserve them, atomically.
        `priority`: the pod's `spec.priority`, kept for preemption."""
        with self.lock:
            self.refresh_pools()
            placement = self.cluster.place(request, node)
            if placement is None:
                failure = self.cluster.check_fit(request, node)
                return failure if failure is not None else FitFailure.GPU
            try:
                self.cluster.reserve(request, placement)
            except ReserveConflict:
                return FitFailure.GPU
            self.views.touched(node)
            self._entries[request.uid] = PodEntry(request.namespace, request.name, node, Holding.IN_FLIGHT, self._clock(), priority)
            return placement

    def adopt_for_bind(self, request: PodRequest, allocation: Allocation, *, priority: int = 0) -> bool:
        """A retried bind of a pod already annotated for this node: hold exactly that record."""
        with self.lock:
            entry = self._entries.get(request.uid)
            if entry is None or entry.node != allocation.node or self.cluster.pod(request.uid) is None:
                self._release(request.uid)
                self.views.touched(allocation.node)
                try:
                    self.cluster.restore(request, allocation)
                except ReserveConflict:
                    return False
            self._entries[request.uid] = PodEntry(
                request.namespace, request.name, allocation.node, Holding.IN_FLIGHT, parse_rfc3339(allocation.assumed_at), priority
            )
            return True

    def release_pod(self, uid: PodUid) -> None:
        with self.lock:
            self._release(uid)

    def finish_bind(self, uid: PodUid, *, bound: bool) -> None:
        with self.lock:
            entry = self._entries.get(uid)
            if entry is None:
                return
            if bound:
                entry.holding = Holding.BOUND
            else:
                self._release(uid)

    def keep_assumed(self, uid: PodUid) -> None:
        """The pod is annotated but the bind failed: keep the reservation until the TTL."""
        with self.lock:
            entry = self._entries.get(uid)
            if entry is not None:
                entry.holding = Holding.ASSUMED

    def expire(self) -> list[Expired]:
        """Release assumed (annotated, unbound) reservations older than the TTL."""
        now = self._clock()
        out: list[Expired] = []
        with self.lock:
            for uid, entry in list(self._entries.items()):
                if entry.holding is Holding.ASSUMED and now - entry.assumed_at > self.settings.assume_ttl_s:
                    self._release(uid)
                    self._expired[uid] = entry.assumed_at
                    out.append(Expired(entry.namespace, entry.name, uid, entry.node))
        return out

    # --- introspection (metrics, tests) ---------------------------------------------------------
    def holding(self, uid: str) -> Holding | None:
        with self.lock:
            entry = self._entries.get(PodUid(uid))
            return entry.holding if entry is not None else None

    def summary(self) -> tuple[int, int, int, float]:
        """(nodes, pods holding capacity, GPUs, allocated GPUs)."""
        with self.lock:
            usage = self.cluster.usage()
            return len(self.cluster.nodes), len(self._entries), usage.gpus, usage.allocated_milli / MILLI_PER_GPU

    def refresh_metrics(self, metrics: ExtenderMetrics) -> None:
        nodes, pods, gpus, allocated = self.summary()
        metrics.nodes.set(nodes)
        metrics.pods.set(pods)
        metrics.gpus.set(gpus)
        metrics.allocated_gpu.set(allocated)
        with self.lock:
            metrics.mix_epoch.set(self.cluster.policy().epoch)
            metrics.set_pools(self._pool_usage.figures(self.cluster))


def _same_reservation(expired_at: float | None, assumed_at: str) -> bool:
    """Whether an allocation record is the one whose reservation expired at `expired_at`.

    The cache keeps the bind's clock reading and the record carries the time written a moment
    later, so they differ by the bind's duration; a new bind of the same pod comes at least one
    TTL later."""
    if expired_at is None:
        return False
    try:
        return abs(parse_rfc3339(assumed_at) - expired_at) < 1.0
    except ValueError:
        return False


def _inventory(node: NodeState) -> tuple[object, ...]:
    gpus = tuple(sorted((g.index, g.uuid, g.model, g.memory_mib, g.healthy) for g in node.gpus))
    return (gpus, node.labels, node.cpu_milli, node.memory_mib)
