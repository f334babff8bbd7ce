"""The extender's cache: shared GPU nodes and the pods holding GPU capacity on them.

It wraps `tessera.alloc.Cluster` (the inventory, reservations and placement policy) with what
only the extender knows, kept by `pod_book.PodBook`: which reservations are bound, which are in
the middle of a bind, which wait for an unanswered write to be settled, which were rebuilt from
records after a restart, and which records conflict. One lock guards everything; the policy code
is pure and not thread-safe.

The pods' `tessera.dev/allocation` records are the truth (`pod_book` has the rules); a bind in
flight in this process owns its pod until it finishes; the leader settles assumed reservations
older than `assume_ttl_s` (kube-scheduler gave up, or the extender died) by stripping their
records before it gives their capacity back.
"""
from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections import OrderedDict
from pathlib import Path
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tessera.alloc import Cluster, Evaluation, FitFailure, InvalidRequest, NodeState, Placement, PodRequest, ReserveConflict
from tessera.alloc import node_state_from_k8s
from tessera.alloc.model import MILLI_PER_GPU, PodUid
from tessera.model.contract import ANNOTATION_ALLOCATION, LABEL_ALLOCATION, LABEL_POOL, LABEL_POOL_KIND
from tessera.kube.api import KubeObject
from tessera.model.pools_file import NO_DOCUMENT, PoolsFile
from tessera.scheduler.evaluation_views import EvaluationViews
from tessera.scheduler.metrics import ExtenderMetrics
from tessera.scheduler.pod_book import PodBook
from tessera.scheduler.pod_records import (
    ConflictNotice,
    ConflictReason,
    HeldPod,
    Holding,
    PodEntry,
    Settle,
    pod_priority,
    rfc3339,
)
from tessera.scheduler.pool_settings import PolicyLabels, entries_changed
from tessera.scheduler.pool_usage import PoolUsageMeter

log = logging.getLogger(__name__)

# what other modules import from here: the records' vocabulary lives in pod_records
__all__ = ["ConflictNotice", "ConflictReason", "HeldPod", "Holding", "PodEntry", "SchedulerState", "Settle", "StateSettings", "is_shared_gpu_node", "pod_priority"]


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


def is_shared_gpu_node(node: KubeObject) -> bool:
    """A node of a shared pool on the device-plugin route (a dra pool's nodes are kube-scheduler's)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_POOL_KIND) in (None, "shared") and labels.get(LABEL_ALLOCATION) != "dra"


class SchedulerState:
    def __init__(
        self,
        cluster: Cluster,
        settings: StateSettings,
        *,
        clock: Callable[[], float],
        pools_file: Path | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`pools_file`: the mounted pools document; its per-pool placement, sharing policy and
        shares per GPU apply to the pool's nodes (see `pool_settings`); None = node labels only.
        `monotonic`: the clock `read_at` times come from (reads newer than our own writes)."""
        self.cluster = cluster
        self.settings = settings
        self.lock = threading.RLock()
        self._clock = clock
        self.monotonic = monotonic
        self.views = EvaluationViews()  # every change of a node must be reported to it
        self.book = PodBook(cluster, self.views.touched)
        self._node_fingerprints: dict[str, str] = {}
        self._seen: OrderedDict[bytes, None] = OrderedDict()  # digests: a UID is the client's string, of any length
        self._policy_labels = PolicyLabels()
        self._pool_usage = PoolUsageMeter()
        self._pools_file = PoolsFile(pools_file)
        self._pools = NO_DOCUMENT
        self._node_objects: dict[str, KubeObject] = {}  # shared nodes as last seen, re-applied on a pools edit
        self.refresh_pools()

    # --- pools file -----------------------------------------------------------------------------
    def refresh_pools(self) -> None:
        """Re-read the pools file if it may have changed; nodes of a pool whose settings changed are
        re-applied, which marks them changed for the evaluation caches."""
        with self.lock:
            document = self._pools_file.document()
            if document is self._pools:
                return
            changed = entries_changed(self._pools, document)
            self._pools = document
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
            state.labels = self._policy_labels.apply(name, state.labels, self._pools)
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
            self.book.node_added(state.name, self.cluster.add_node(state))
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
            self.book.node_removed(self.cluster.remove_node(name))

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
    def apply_pod(self, pod: KubeObject, read_at: float | None = None) -> None:
        """A version of a pod from the watch (`read_at` None) or from a read that began at
        `self.monotonic()` time `read_at` (`pod_book` says what each may change)."""
        with self.lock:
            self.book.apply_pod(pod, read_at)

    def delete_pod(self, pod: KubeObject) -> None:
        with self.lock:
            self.book.delete(PodUid(str((pod.get("metadata") or {}).get("uid", ""))))

    def replace_pods(self, pods: Iterable[KubeObject], listed_at: float = -math.inf) -> None:
        """After a (re)list that began at `listed_at`: apply every pod, release the ones that are
        gone (except those this process wrote to after the list began)."""
        pods = list(pods)
        with self.lock:
            self.book.replace(pods, listed_at)

    # --- scheduling -----------------------------------------------------------------------------
    def observe_once(self, request: PodRequest) -> None:
        """Feed a pod into the workload mix the first time it is seen (caller holds the lock)."""
        key = hashlib.blake2b(request.uid.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        if key in self._seen:
            return
        self._seen[key] = None
        if len(self._seen) > self.settings.seen_pods_limit:
            self._seen.popitem(last=False)
        self.cluster.observe(request)  # may start a new epoch; the views notice it

    def evaluations(self, request: PodRequest, names: Iterable[str]) -> dict[str, Evaluation | FitFailure]:
        """The production policy's answer for every node in `names` (caller holds the lock)."""
        self.refresh_pools()
        return self.views.evaluations(request, names, self.cluster.policy().epoch, self.cluster.evaluate_many)

    def held_on(self, node: str) -> list[HeldPod]:
        """The pods holding GPU capacity on `node` (caller holds the lock)."""
        out = []
        for uid in self.book.on_node(node):
            entry = self.book.entries[uid]
            placement = self.cluster.placement(uid)
            if placement is None or placement.node != node:
                continue
            out.append(HeldPod(uid, entry.priority, entry.started_at, placement.gpu_indices, entry.holding is Holding.BOUND))
        return out

    def held_node(self, uid: PodUid) -> str | None:
        """The node a pod already holds capacity on (its own share must not count against it)."""
        entry = self.book.entries.get(uid)
        return entry.node if entry is not None else None

    # --- bind -------------------------------------------------------------------------------------
    def reserve_for_bind(self, request: PodRequest, node: str, *, priority: int = 0) -> Placement | FitFailure:
        """Choose GPUs on `node` with the production policy and reserve them, atomically, for the
        record the bind is about to write (`entry`). The caller has read that the pod carries no
        record, so whatever this process still held for it is given back first."""
        with self.lock:
            self.refresh_pools()
            self.book.release(request.uid)
            placement = self.cluster.place(request, node)
            if placement is None:
                failure = self.cluster.check_fit(request, node)
                return failure if failure is not None else FitFailure.GPU
            try:
                self.cluster.reserve(request, placement)
            except ReserveConflict:
                return FitFailure.GPU
            self.views.touched(node)
            now = self._clock()
            allocation = self.cluster.to_allocation(placement, rfc3339(now))
            record = allocation.pod_annotations()[ANNOTATION_ALLOCATION]
            self.book.add(request.uid, PodEntry(request.namespace, request.name, node, Holding.IN_FLIGHT, now, request, allocation, record, priority))
            return placement

    def adopt_for_bind(self, uid: PodUid, *, priority: int = 0) -> bool:
        """A retried bind of a pod whose record (just read and applied) names the bind's node:
        hold exactly that record, unless it is in conflict or cannot be counted."""
        with self.lock:
            entry = self.book.entries.get(uid)
            if entry is None or entry.holding is Holding.UNCONFIRMED or not entry.counted or self.book.flagged(uid) is not None:
                return False
            entry.holding = Holding.IN_FLIGHT
            entry.priority = priority
            return True

    def entry(self, uid: PodUid) -> PodEntry | None:
        """The reservation of a pod (the caller must not change it)."""
        with self.lock:
            return self.book.entries.get(uid)

    def wrote(self, uid: PodUid, rv: str | None) -> None:
        """Our write of the entry's record was applied (just now); the pod's version is now `rv`."""
        with self.lock:
            entry = self.book.entries.get(uid)
            if entry is not None:
                entry.awaiting, entry.written_at, entry.precondition = rv, self.monotonic(), None
                if entry.holding is Holding.UNCONFIRMED:
                    entry.holding = Holding.ASSUMED

    def unconfirmed(self, uid: PodUid, precondition: str | None) -> None:
        """Our write of the entry's record got no clear answer (just now): keep the capacity until
        a read shows the record, or shows the pod past `precondition` without it."""
        with self.lock:
            entry = self.book.entries.get(uid)
            if entry is not None:
                entry.holding, entry.precondition, entry.written_at, entry.awaiting = Holding.UNCONFIRMED, precondition, self.monotonic(), None
                self.book.let_go(uid)

    def stripped(self, uid: PodUid, record: str, rv: str | None) -> None:
        """We removed `record` from the pod: its capacity goes back."""
        with self.lock:
            self.book.stripped(uid, record, rv)

    def release_pod(self, uid: PodUid) -> None:
        """Give back what a bind reserved before it wrote anything."""
        with self.lock:
            self.book.release(uid)

    def finish_bind(self, uid: PodUid, *, bound: bool) -> None:
        """`bound`: the Binding is in; otherwise the bind wrote nothing and its reservation goes."""
        with self.lock:
            entry = self.book.entries.get(uid)
            if entry is None:
                return
            if bound:
                entry.holding = Holding.BOUND
                self.book.let_go(uid)
            else:
                self.book.release(uid)

    def keep_assumed(self, uid: PodUid) -> None:
        """The pod carries its record but is not bound: keep the reservation (a retry re-uses
        it; the TTL settles it)."""
        with self.lock:
            entry = self.book.entries.get(uid)
            if entry is not None and entry.holding is not Holding.UNCONFIRMED:
                entry.holding = Holding.ASSUMED
                self.book.let_go(uid)

    def to_settle(self) -> list[Settle]:
        """Reservations the leader settles against the API server: assumed ones past the TTL and
        ones whose record write got no clear answer."""
        with self.lock:
            out = []
            for uid in self.book.expired(self._clock(), self.settings.assume_ttl_s):
                e = self.book.entries[uid]
                out.append(Settle(e.namespace, e.name, uid, e.node, e.record, e.holding, e.precondition))
            return out

    def expired(self, uid: PodUid) -> bool:
        """Whether an assumed reservation is past its TTL now."""
        with self.lock:
            entry = self.book.entries.get(uid)
            return entry is not None and entry.holding is Holding.ASSUMED and self._clock() - entry.assumed_at > self.settings.assume_ttl_s

    # --- conflicts --------------------------------------------------------------------------------
    def take_conflict_notices(self) -> list[ConflictNotice]:
        with self.lock:
            return self.book.take_notices()

    def conflict_counts(self) -> dict[ConflictReason, int]:
        with self.lock:
            return self.book.conflict_counts()

    # --- introspection (metrics, tests) ---------------------------------------------------------
    def holding(self, uid: str) -> Holding | None:
        with self.lock:
            entry = self.book.entries.get(PodUid(uid))
            return entry.holding if entry is not None else None

    def summary(self) -> tuple[int, int, int, float]:
        """(nodes, pods holding capacity, GPUs, allocated GPUs)."""
        with self.lock:
            usage = self.cluster.usage()
            return len(self.cluster.nodes), len(self.book.entries), usage.gpus, usage.allocated_milli / MILLI_PER_GPU

    def counted_usage(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(node, GPU index) -> (milli, MiB) the extender counts, summed from its records."""
        with self.lock:
            return self.book.counted_usage()

    def refresh_metrics(self, metrics: ExtenderMetrics) -> None:
        nodes, pods, gpus, allocated = self.summary()
        metrics.nodes.set(nodes)
        metrics.pods.set(pods)
        metrics.gpus.set(gpus)
        metrics.allocated_gpu.set(allocated)
        for reason, count in self.conflict_counts().items():
            metrics.record_conflicts.labels(reason.value).set(count)
        with self.lock:
            metrics.mix_epoch.set(self.cluster.policy().epoch)
            metrics.set_pools(self._pool_usage.figures(self.cluster))


def _inventory(node: NodeState) -> tuple[object, ...]:
    gpus = tuple(sorted((g.index, g.uuid, g.model, g.memory_mib, g.healthy) for g in node.gpus))
    return (gpus, node.labels, node.cpu_milli, node.memory_mib)
