"""The extender's reservations, kept in step with the allocation records on the pods.

Rules, in order (docs/scheduler-extender.md, "Failure model"):

1. A record on a live pod is counted, whatever else is true: past 100 % of its GPUs if records
   conflict (flagged, reported, and nothing more fits there), parked when its node is not in the
   inventory (counted again when the node comes back). A pod that may be running is never
   forgotten.
2. Capacity is given back only when the API server shows the record gone, replaced, or the pod
   gone or finished. An unanswered write is kept as `UNCONFIRMED` until a read settles it.
3. What this process wrote is newer than watch events it has not caught up with: an entry
   carries the resourceVersion of our last write (`awaiting`) and ignores older events; a read
   that began after our last write was answered (`read_at` > `written_at`) is authoritative.

Not thread-safe: the state lock guards every call.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from tessera.alloc import Cluster, InvalidRequest, ReserveConflict, pod_request_from_k8s
from tessera.alloc.model import MILLI_PER_CORE, PodUid
from tessera.kube.api import KubeObject
from tessera.model.contract import ANNOTATION_ALLOCATION, Allocation
from tessera.scheduler.pod_records import (
    TERMINAL_PHASES,
    ConflictNotice,
    ConflictReason,
    Holding,
    PodEntry,
    parse_record,
    parse_rfc3339,
    pod_priority,
    pod_started_at,
    pod_uid,
    resource_version,
)

log = logging.getLogger(__name__)

_TOMBSTONES: Final = 10_000  # stripped records remembered until the watch shows the strip
_NOTICES: Final = 1_000  # conflict notices waiting to be reported; older ones are dropped (still logged, still counted)


@dataclass(frozen=True)
class _Tombstone:
    record: str
    rv: str | None  # resourceVersion of the pod after the strip


@dataclass(frozen=True)
class _Flag:
    reason: ConflictReason
    namespace: str
    name: str
    node: str


class PodBook:
    def __init__(self, cluster: Cluster, touched: Callable[[str], None]) -> None:
        """`touched(node)`: tells the evaluation caches a node's allocations changed."""
        self.cluster = cluster
        self._touched = touched
        self.entries: dict[PodUid, PodEntry] = {}
        self._by_node: dict[str, set[PodUid]] = {}
        self._tombstones: OrderedDict[PodUid, _Tombstone] = OrderedDict()
        self._flags: dict[PodUid, _Flag] = {}
        self._flagged_nodes: set[str] = set()
        self._notices: list[ConflictNotice] = []

    # --- what the API server shows ----------------------------------------------------------------
    def apply_pod(self, pod: KubeObject, read_at: float | None = None) -> None:
        """One version of a pod: from the watch (`read_at` None, in order but possibly behind what
        this process wrote) or from a read that began at monotonic time `read_at`."""
        uid = pod_uid(pod)
        meta = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self.release(uid)
            self._tombstones.pop(uid, None)
            self._unflag(uid)
            return
        entry = self.entries.get(uid)
        rv = resource_version(pod)
        text = (meta.get("annotations") or {}).get(ANNOTATION_ALLOCATION) or None
        bound_to = (pod.get("spec") or {}).get("nodeName") or None
        fresh = entry is not None and read_at is not None and read_at > entry.written_at
        if entry is not None:
            if entry.holding is Holding.IN_FLIGHT:
                entry.held_back.append((pod, read_at))  # the bind owns the pod until it lets go
                return
            if entry.holding is Holding.UNCONFIRMED:
                if text == entry.record:
                    entry.precondition = entry.awaiting = None  # the write landed: this version holds it
                elif not fresh or rv == entry.precondition:
                    return  # it may still land: keep the capacity until a read tells
                else:
                    self.release(uid)  # seen at another version without it: it can never land
                    entry = None
            elif entry.awaiting is not None and not fresh:
                if rv != entry.awaiting:
                    return  # older than our own last write
                entry.awaiting = None
            elif fresh:
                entry.awaiting = None
        tomb = self._tombstones.get(uid)
        if tomb is not None:
            if read_at is not None or rv == tomb.rv:
                del self._tombstones[uid]
            elif text == tomb.record:
                return  # a version from before we stripped that record
        if text is None:
            self.release(uid)
            self._unflag(uid)
            return
        allocation = parse_record(text)
        if allocation is None:
            # which GPUs it holds is unknown: keep what was counted for the pod before, and say so
            self._flag(uid, ConflictReason.UNREADABLE, str(meta.get("namespace", "")), str(meta.get("name", "")), entry.node if entry else "", "its allocation record does not parse")
            return
        if bound_to is not None and bound_to != allocation.node:
            log.warning("pod %s/%s is bound to %s but its allocation names %s", meta.get("namespace"), meta.get("name"), bound_to, allocation.node)
            self.release(uid)
            return
        self.restore(pod, uid, allocation, text, Holding.BOUND if bound_to else Holding.ASSUMED)

    def let_go(self, uid: PodUid) -> None:
        """The bind that owned the pod has set its holding: apply, in order, the versions held
        back meanwhile; those before our own write are skipped by rule 3 as usual."""
        entry = self.entries.get(uid)
        if entry is None or entry.holding is Holding.IN_FLIGHT:
            return
        held, entry.held_back = entry.held_back, []
        for pod, read_at in held:
            self.apply_pod(pod, read_at)

    def restore(self, pod: KubeObject, uid: PodUid, allocation: Allocation, text: str, holding: Holding) -> None:
        entry = self.entries.get(uid)
        if entry is not None and entry.record == text:
            entry.holding = holding
            entry.priority = pod_priority(pod)
            entry.started_at = pod_started_at(pod)
            return
        self.release(uid)
        meta = pod["metadata"]
        try:
            request = pod_request_from_k8s(pod)
        except InvalidRequest as exc:
            self._flag(uid, ConflictReason.UNREADABLE, str(meta.get("namespace", "")), str(meta.get("name", "")), allocation.node, f"its GPU request does not parse: {exc}")
            return
        self._unflag(uid, ConflictReason.UNREADABLE)
        entry = PodEntry(
            str(meta.get("namespace", "default")), str(meta.get("name", "")), allocation.node, holding,
            parse_rfc3339(allocation.assumed_at), request, allocation, text, pod_priority(pod), pod_started_at(pod),
        )
        self.add(uid, entry)
        self.count(uid)

    def delete(self, uid: PodUid) -> None:
        self.release(uid)
        self._tombstones.pop(uid, None)
        self._unflag(uid)

    def replace(self, pods: list[KubeObject], listed_at: float) -> None:
        """A (re)list that began at monotonic time `listed_at`: pods missing from it are gone,
        unless this process wrote to them after the list began (the list may predate that)."""
        present = {pod_uid(p) for p in pods}
        for uid, entry in list(self.entries.items()):
            if uid not in present and entry.holding is not Holding.IN_FLIGHT and listed_at > entry.written_at:
                self.delete(uid)
        for uid in [u for u in self._flags if u not in present and u not in self.entries]:
            self._unflag(uid)
        for pod in pods:
            self.apply_pod(pod, listed_at)

    # --- counting -----------------------------------------------------------------------------------
    def add(self, uid: PodUid, entry: PodEntry) -> None:
        self.entries[uid] = entry
        self._by_node.setdefault(entry.node, set()).add(uid)

    def count(self, uid: PodUid) -> None:
        """Count an entry's record in the inventory, forced past capacity if records conflict, or
        park it when its node (or a GPU it names) is not there."""
        entry = self.entries[uid]
        if entry.node not in self.cluster.nodes:
            entry.counted = False
            return
        try:
            self.cluster.restore(entry.request, entry.allocation, force=True)
        except ReserveConflict as exc:
            entry.counted = False
            self._flag(uid, ConflictReason.UNKNOWN_GPU, entry.namespace, entry.name, entry.node, str(exc))
            return
        entry.counted = True
        self._unflag(uid, ConflictReason.UNKNOWN_GPU)
        self._touched(entry.node)
        self.check_overcommit(entry.node)

    def node_added(self, name: str, dropped: Iterable[PodUid]) -> None:
        """The node's inventory is new or changed: `dropped` lost a GPU they hold; parked
        entries of the node are counted again."""
        for uid in dropped:
            entry = self.entries.get(uid)
            if entry is not None:
                entry.counted = False
        for uid in list(self._by_node.get(name, ())):
            if not self.entries[uid].counted:
                self.count(uid)  # flags the ones whose GPUs are still missing
        self.check_overcommit(name)

    def node_removed(self, uncounted: Iterable[PodUid]) -> None:
        """The node left the inventory: its entries stay, parked, until their pods go."""
        for uid in uncounted:
            entry = self.entries.get(uid)
            if entry is not None:
                entry.counted = False
                self._unflag(uid, ConflictReason.OVERCOMMIT)

    def check_overcommit(self, node: str) -> None:
        over = self.cluster.overcommitted(node)
        if not over and node not in self._flagged_nodes:
            return
        for uid in self._by_node.get(node, ()):
            placement = self.cluster.placement(uid)
            entry = self.entries[uid]
            if placement is not None and placement.node == node and placement.gpu_indices & over:
                gpus = ", ".join(str(i) for i in sorted(placement.gpu_indices & over))
                self._flag(uid, ConflictReason.OVERCOMMIT, entry.namespace, entry.name, node, f"with the other records on GPU {gpus} of {node} it takes more than the GPU")
            else:
                self._unflag(uid, ConflictReason.OVERCOMMIT)

    def release(self, uid: PodUid) -> None:
        entry = self.entries.pop(uid, None)
        if entry is not None:
            held = self._by_node.get(entry.node)
            if held is not None:
                held.discard(uid)
                if not held:
                    del self._by_node[entry.node]
        placement = self.cluster.release(uid)
        if placement is not None:
            self._touched(placement.node)
            if placement.node in self._flagged_nodes:
                self.check_overcommit(placement.node)
        flag = self._flags.get(uid)
        if flag is not None and flag.reason is not ConflictReason.UNREADABLE:
            self._unflag(uid)

    def stripped(self, uid: PodUid, record: str, rv: str | None) -> None:
        """We removed `record` from the pod (the write returned `rv`): give its capacity back and
        ignore watch events that still carry it."""
        entry = self.entries.get(uid)
        if entry is not None and entry.record == record:
            self.release(uid)
        self._tombstones[uid] = _Tombstone(record, rv)
        self._tombstones.move_to_end(uid)
        while len(self._tombstones) > _TOMBSTONES:
            self._tombstones.popitem(last=False)

    # --- conflicts ------------------------------------------------------------------------------------
    def _flag(self, uid: PodUid, reason: ConflictReason, namespace: str, name: str, node: str, detail: str) -> None:
        old = self._flags.get(uid)
        if old is not None and old.reason is reason:
            return
        self._flags[uid] = _Flag(reason, namespace, name, node)
        if node:
            self._flagged_nodes.add(node)
        log.error("allocation record of pod %s/%s (%s) in conflict (%s): %s", namespace, name, uid, reason.value, detail)
        self._notices.append(ConflictNotice(namespace, name, uid, node, reason, detail))
        del self._notices[:-_NOTICES]

    def _unflag(self, uid: PodUid, reason: ConflictReason | None = None) -> None:
        flag = self._flags.get(uid)
        if flag is None or (reason is not None and flag.reason is not reason):
            return
        del self._flags[uid]
        log.info("allocation record of pod %s/%s (%s) no longer in conflict (%s)", flag.namespace, flag.name, uid, flag.reason.value)
        if flag.node and not any(f.node == flag.node for f in self._flags.values()):
            self._flagged_nodes.discard(flag.node)

    def flagged(self, uid: PodUid) -> ConflictReason | None:
        flag = self._flags.get(uid)
        return flag.reason if flag is not None else None

    def conflict_counts(self) -> dict[ConflictReason, int]:
        counts = dict.fromkeys(ConflictReason, 0)
        for flag in self._flags.values():
            counts[flag.reason] += 1
        return counts

    def take_notices(self) -> list[ConflictNotice]:
        notices, self._notices = self._notices, []
        return notices

    # --- queries --------------------------------------------------------------------------------------
    def on_node(self, node: str) -> Iterable[PodUid]:
        return self._by_node.get(node, ())

    def expired(self, now: float, ttl_s: float) -> list[PodUid]:
        return [
            uid for uid, e in self.entries.items()
            if e.holding is Holding.UNCONFIRMED or (e.holding is Holding.ASSUMED and now - e.assumed_at > ttl_s)
        ]

    def counted_usage(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(node, GPU index) -> (milli, MiB) summed over the counted entries' records."""
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for entry in self.entries.values():
            if not entry.counted:
                continue
            for shares in entry.allocation.containers.values():
                for share in shares:
                    milli, mib = out.get((entry.node, share.index), (0, 0))
                    out[(entry.node, share.index)] = (milli + share.core * MILLI_PER_CORE, mib + share.memory_mib)
        return out

