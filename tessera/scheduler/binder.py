"""Bind: choose GPUs, reserve them, record the decision on the pod, create the Binding.

Order of effects, and why it is safe:

1. Read the pod and apply that read to the cache: the pod's record is the truth (`pod_book`).
2. Reserve in the cache under the state lock (no two pods get the same capacity in this process),
   or re-use the record the pod already carries for this node (a retry, or a restart).
3. Write the allocation ConfigMap (harmless on its own: nothing reads it before the pod is bound).
4. Patch the pod annotations with the resourceVersion read in step 1 as precondition. From here
   the decision survives a restart. An unclear answer is settled by reading back
   (`pod_writes.conditional_patch`); while it cannot be, the capacity stays reserved
   (`UNCONFIRMED`) and kube-scheduler is told to retry.
5. POST the Binding. Whatever it answers, the record is on the pod: the reservation stays until a
   read shows the pod bound elsewhere or gone.

A record that must make way (it names another node than kube-scheduler chose, or it conflicts with
other records) is stripped from the pod, under the same precondition, before its capacity is given
back. Binds of one pod are serialised by a striped lock, binds of different pods run concurrently
and meet only at the state lock. The leader settles the reservations left behind (`settle`).
Only the leader binds: `leading()` is checked before every write.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

from tessera.alloc import FitFailure, InvalidRequest, PodRequest, pod_request_from_k8s
from tessera.alloc.model import PodUid
from tessera.kube.api import KubeApi, KubeApiError, KubeObject, NotFound, may_have_applied
from tessera.kube.events import PodRef, pod_event
from tessera.model.allocation_record import configmap_body, configmap_data, configmap_name, uses_mps
from tessera.model.contract import ANNOTATION_ALLOCATION, ANNOTATION_ALLOCATION_CONFIGMAP, ANNOTATION_GPU_INDEX_PREFIX, Allocation
from tessera.scheduler.extender_types import ExtenderBindingArgs, ExtenderBindingResult
from tessera.scheduler.metrics import BindOutcome, ExtenderMetrics
from tessera.scheduler.pod_records import Holding, PodEntry, Settle, parse_record, pod_priority, pod_uid, resource_version
from tessera.scheduler.pod_writes import Outcome, WriteResult, conditional_patch
from tessera.scheduler.state import SchedulerState

log = logging.getLogger(__name__)

NOT_LEADER: Final = "this extender replica is not the leader; kube-scheduler will retry"
EVENT_COMPONENT: Final = "tessera-extender"


@dataclass(frozen=True)
class BindSettings:
    """How bind retries.

    conflict_retries: default 5: re-read the pod and decide again this many times when the pod
        changes under a bind (a 409 to a write, or a stale record stripped first).
    lock_stripes: default 64: binds of one pod are serialised by one of this many locks (bounded
        memory, little contention between different pods).
    """

    conflict_retries: int = 5
    lock_stripes: int = 64


class BindFailed(Exception):
    def __init__(self, outcome: BindOutcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


class _Again(Exception):
    """The pod changed under this attempt: read it again and decide again."""


def _record_of(pod: KubeObject) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ALLOCATION) or None


class Binder:
    def __init__(
        self,
        api: KubeApi,
        state: SchedulerState,
        metrics: ExtenderMetrics,
        settings: BindSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        """`leading()`: whether this replica may write (leader election); always, without it."""
        self._api = api
        self._state = state
        self._metrics = metrics
        self._settings = settings or BindSettings()
        self._clock = clock
        self._leading = leading
        self._locks = [threading.Lock() for _ in range(self._settings.lock_stripes)]
        self._serial = itertools.count()

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        return self._locks[zlib.crc32(f"{namespace}/{name}".encode("utf-8", "surrogatepass")) % len(self._locks)]

    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        with self._lock(args.pod_namespace, args.pod_name):
            try:
                outcome = self._bind(args)
            except BindFailed as exc:
                self._metrics.binds.labels(exc.outcome.value).inc()
                log.info("bind %s/%s to %s failed: %s", args.pod_namespace, args.pod_name, args.node, exc)
                return ExtenderBindingResult(error=str(exc))
            except Exception:  # a bug of ours: the pod may carry a record, so its reservation stays (the sweep settles it)
                log.exception("bind %s/%s to %s failed unexpectedly", args.pod_namespace, args.pod_name, args.node)
                if args.pod_uid:
                    self._state.keep_assumed(PodUid(args.pod_uid))
                self._metrics.binds.labels(BindOutcome.ERROR.value).inc()
                return ExtenderBindingResult(error="tessera: internal error while binding; kube-scheduler will retry")
        self._metrics.binds.labels(outcome.value).inc()
        return ExtenderBindingResult()

    def _bind(self, args: ExtenderBindingArgs) -> BindOutcome:
        if not self._leading():
            raise BindFailed(BindOutcome.ERROR, NOT_LEADER)
        for _ in range(self._settings.conflict_retries + 1):
            try:
                return self._attempt(args)
            except _Again:
                self._metrics.conflicts.inc()
        raise BindFailed(BindOutcome.CONFLICT, "the pod kept changing while binding; kube-scheduler will retry")

    def _attempt(self, args: ExtenderBindingArgs) -> BindOutcome:
        read_at = self._state.monotonic()
        pod = self._read_pod(args)
        uid = pod_uid(pod)
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            if bound_to != args.node:
                raise BindFailed(BindOutcome.CONFLICT, f"pod is already bound to node {bound_to}")
            self._state.apply_pod(pod, read_at)  # a retry after a bind whose answer was lost
            return BindOutcome.ALREADY_BOUND
        try:
            request = pod_request_from_k8s(pod)
        except InvalidRequest as exc:
            raise BindFailed(BindOutcome.ERROR, str(exc)) from None
        self._state.apply_pod(pod, read_at)
        entry = self._state.entry(uid)
        if entry is not None and entry.holding is Holding.UNCONFIRMED:
            self._fence(pod, entry)
            raise _Again
        text = _record_of(pod)
        if text is not None:
            allocation = parse_record(text)
            if allocation is not None and allocation.node == args.node and self._state.adopt_for_bind(uid, priority=pod_priority(pod)):
                return self._complete(args, pod, request, allocation, reused=True)
            # a record for another node, in conflict, or unreadable: it goes before its capacity does
            self._strip(pod, text)
            raise _Again
        placement = self._state.reserve_for_bind(request, args.node, priority=pod_priority(pod))
        if isinstance(placement, FitFailure):
            raise BindFailed(BindOutcome.NO_FIT, f"pod does not fit on node {args.node}: {placement.value}")
        reserved = self._state.entry(uid)
        assert reserved is not None  # just reserved under this pod's lock
        return self._complete(args, pod, request, reserved.allocation, reused=False)

    def _read_pod(self, args: ExtenderBindingArgs) -> KubeObject:
        try:
            pod = self._api.get_pod(args.pod_namespace, args.pod_name)
        except NotFound:
            raise BindFailed(BindOutcome.ERROR, "pod not found (deleted?)") from None
        except KubeApiError as exc:
            raise BindFailed(BindOutcome.ERROR, f"cannot read the pod: {exc}") from None
        if args.pod_uid and pod["metadata"].get("uid") != args.pod_uid:
            raise BindFailed(BindOutcome.ERROR, "pod was recreated (UID changed); kube-scheduler will retry the new one")
        return pod

    def _abandon(self, request: PodRequest, *, reused: bool) -> None:
        """The bind stops before its record is written: a re-used record stays (assumed), a new
        reservation goes."""
        if reused:
            self._state.keep_assumed(request.uid)
        else:
            self._state.release_pod(request.uid)

    def _complete(self, args: ExtenderBindingArgs, pod: KubeObject, request: PodRequest, allocation: Allocation, *, reused: bool) -> BindOutcome:
        meta = pod["metadata"]
        namespace, name = str(meta.get("namespace", "default")), str(meta["name"])
        if not self._leading():
            self._abandon(request, reused=reused)
            raise BindFailed(BindOutcome.ERROR, NOT_LEADER)
        try:
            self._write_configmap(pod, allocation)
        except KubeApiError as exc:
            self._abandon(request, reused=reused)
            raise BindFailed(BindOutcome.ERROR, f"cannot write the allocation ConfigMap: {exc}") from None
        annotations = self._annotations(pod, allocation)
        if not reused or annotations.keys() - (meta.get("annotations") or {}).keys():
            precondition = resource_version(pod)
            record = annotations[ANNOTATION_ALLOCATION]
            result = conditional_patch(
                self._api, namespace, name, annotations, precondition=precondition, monotonic=self._state.monotonic,
                shows=lambda p: all(((p.get("metadata") or {}).get("annotations") or {}).get(k) == v for k, v in annotations.items()),
            )
            self._count("record", result)
            if result.outcome is Outcome.UNRESOLVED:
                if reused:
                    self._state.keep_assumed(request.uid)
                else:
                    self._state.unconfirmed(request.uid, precondition)
                raise BindFailed(BindOutcome.ERROR, f"the allocation record's write is unconfirmed ({result.reason}); its GPUs stay reserved, kube-scheduler will retry")
            if result.outcome is Outcome.NOT_APPLIED:
                self._abandon(request, reused=reused)
                if result.pod is not None:
                    raise _Again  # the pod changed: decide again on what it is now
                raise BindFailed(BindOutcome.ERROR, f"cannot record the allocation: {result.reason}")
            self._state.wrote(request.uid, result.rv)
            log.debug("recorded %s on %s/%s", record, namespace, name)
        # the record is on the pod: from here its capacity stays until a read shows otherwise
        if not self._leading():
            self._state.keep_assumed(request.uid)
            raise BindFailed(BindOutcome.ERROR, NOT_LEADER)
        try:
            self._api.bind_pod(namespace, name, str(meta.get("uid", "")), args.node)
        except KubeApiError as exc:
            return self._settle_binding(args, request, exc, reused=reused)
        self._state.finish_bind(request.uid, bound=True)
        return BindOutcome.REUSED if reused else BindOutcome.BOUND

    def _annotations(self, pod: KubeObject, allocation: Allocation) -> dict[str, str | None]:
        out: dict[str, str | None] = dict(allocation.pod_annotations())
        if not (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ALLOCATION_CONFIGMAP):
            out[ANNOTATION_ALLOCATION_CONFIGMAP] = configmap_name(pod)
        return out

    def _write_configmap(self, pod: KubeObject, allocation: Allocation) -> None:
        namespace = str(pod["metadata"].get("namespace", "default"))
        name = configmap_name(pod)
        with self._state.lock:
            node = self._state.cluster.nodes.get(allocation.node)
            memory = {g.index: g.memory_mib for g in node.gpus} if node is not None else {}
            sm_counts = {g.index: g.sm_count for g in node.gpus} if node is not None else {}
            mps = node is not None and uses_mps(node.labels)
        body = configmap_body(pod, name, configmap_data(allocation, memory, mps=mps, sm_counts=sm_counts))
        try:
            self._api.create_configmap(namespace, body)
        except KubeApiError as exc:
            if exc.status != 409 and not may_have_applied(exc):
                raise
            self._api.replace_configmap(namespace, name, body)  # an earlier attempt's, or the webhook's

    def _settle_binding(self, args: ExtenderBindingArgs, request: PodRequest, exc: KubeApiError, *, reused: bool) -> BindOutcome:
        """The Binding failed or got no answer; a read tells where the pod is. The record stays."""
        ambiguous = may_have_applied(exc) or exc.status == 409
        self._state.keep_assumed(request.uid)
        read_at = self._state.monotonic()
        try:
            pod = self._api.get_pod(args.pod_namespace, args.pod_name)
        except NotFound:
            self._state.release_pod(request.uid)
            raise BindFailed(BindOutcome.ERROR, "the pod was deleted during the bind") from None
        except KubeApiError as read_error:
            if ambiguous:
                self._metrics.ambiguous_writes.labels("binding", Outcome.UNRESOLVED.value).inc()
            raise BindFailed(BindOutcome.ERROR, f"cannot create the binding: {exc}; reading the pod back failed: {read_error}") from None
        if pod_uid(pod) != request.uid:
            self._state.release_pod(request.uid)
            raise BindFailed(BindOutcome.ERROR, "pod was recreated (UID changed); kube-scheduler will retry the new one")
        node = (pod.get("spec") or {}).get("nodeName")
        if ambiguous:
            self._metrics.ambiguous_writes.labels("binding", (Outcome.APPLIED if node == args.node else Outcome.NOT_APPLIED).value).inc()
        if node == args.node:
            self._state.finish_bind(request.uid, bound=True)
            return BindOutcome.REUSED if reused else BindOutcome.BOUND
        self._state.apply_pod(pod, read_at)
        if node:
            raise BindFailed(BindOutcome.CONFLICT, f"binding refused: the pod is bound to node {node}")
        raise BindFailed(BindOutcome.ERROR, f"cannot create the binding: {exc}; the allocation stays recorded, kube-scheduler will retry")

    def _strip(self, pod: KubeObject, record: str) -> WriteResult:
        """Remove `record` (and its companion annotations) from the pod under its current version;
        its capacity goes back once the API server has the pod without it."""
        meta = pod["metadata"]
        namespace, name = str(meta.get("namespace", "default")), str(meta["name"])
        stale: dict[str, str | None] = {k: None for k in Allocation("", "").pod_annotations()}
        stale |= {k: None for k in (meta.get("annotations") or {}) if k.startswith(ANNOTATION_GPU_INDEX_PREFIX)}
        if not self._leading():
            raise BindFailed(BindOutcome.ERROR, NOT_LEADER)
        result = conditional_patch(
            self._api, namespace, name, stale, precondition=resource_version(pod), monotonic=self._state.monotonic,
            shows=lambda p: _record_of(p) != record,
        )
        self._count("strip", result)
        if result.outcome is Outcome.APPLIED:
            self._state.stripped(pod_uid(pod), record, result.rv)
        elif result.outcome is Outcome.UNRESOLVED:
            raise BindFailed(BindOutcome.ERROR, f"cannot remove the pod's stale allocation record ({result.reason}); kube-scheduler will retry")
        return result

    def _fence(self, pod: KubeObject, entry: PodEntry) -> None:
        """Settle a record write that got no answer, on a pod still at the version it was
        conditioned on: send it again, so it lands now or can never land."""
        meta = pod["metadata"]
        namespace, name = str(meta.get("namespace", "default")), str(meta["name"])
        if not self._leading():
            raise BindFailed(BindOutcome.ERROR, NOT_LEADER)
        annotations = self._annotations(pod, entry.allocation)
        result = conditional_patch(
            self._api, namespace, name, annotations, precondition=entry.precondition, monotonic=self._state.monotonic,
            shows=lambda p: _record_of(p) == entry.record,
        )
        self._count("record", result)
        if result.outcome is Outcome.APPLIED:
            self._state.wrote(entry.request.uid, result.rv)
        elif result.outcome is Outcome.UNRESOLVED:
            raise BindFailed(BindOutcome.ERROR, f"an earlier write of this pod's allocation record is still unconfirmed ({result.reason}); kube-scheduler will retry")
        elif result.pod is not None and result.read_at is not None:
            self._state.apply_pod(result.pod, result.read_at)

    def _count(self, write: str, result: WriteResult) -> None:
        if result.ambiguous:
            self._metrics.ambiguous_writes.labels(write, result.outcome.value).inc()

    # --- the leader's janitor -----------------------------------------------------------------------
    def settle(self, item: Settle) -> None:
        """Settle one reservation `SchedulerState.to_settle` named: read the pod, apply the read,
        then fence an unconfirmed write, or strip an assumed record past its TTL."""
        with self._lock(item.namespace, item.name):
            if not self._leading():
                return
            read_at = self._state.monotonic()
            try:
                pod = self._api.get_pod(item.namespace, item.name)
            except NotFound:
                self._state.delete_pod({"metadata": {"uid": item.uid}})
                return
            except KubeApiError as exc:
                log.info("cannot settle the reservation of %s/%s yet: %s", item.namespace, item.name, exc)
                return
            if pod_uid(pod) != item.uid:
                self._state.delete_pod({"metadata": {"uid": item.uid}})  # that pod is gone; another took its name
                return
            self._state.apply_pod(pod, read_at)
            entry = self._state.entry(pod_uid(pod))
            try:
                if entry is not None and entry.holding is Holding.UNCONFIRMED:
                    self._fence(pod, entry)
                elif entry is not None and self._state.expired(entry.request.uid) and _record_of(pod) == entry.record:
                    if self._strip(pod, entry.record).outcome is Outcome.APPLIED:
                        self._metrics.expired.inc()
            except BindFailed as exc:
                log.info("cannot settle the reservation of %s/%s yet: %s", item.namespace, item.name, exc)

    def report_conflicts(self) -> None:
        """Post a Warning Event on each pod whose record was newly found in conflict (the log line
        and the metric come from the cache itself)."""
        now = datetime.fromtimestamp(self._clock(), tz=timezone.utc)
        for notice in self._state.take_conflict_notices():
            body = pod_event(
                PodRef(notice.namespace, notice.name, notice.uid),
                reason="AllocationConflict",
                message=f"tessera: allocation record in conflict ({notice.reason.value}): {notice.detail}",
                event_type="Warning",
                component=EVENT_COMPONENT,
                node_name=notice.node,
                now=now,
                name_tag="tessera-conflict",
                serial=next(self._serial),
            )
            try:
                self._api.create_event(notice.namespace, body)
            except KubeApiError as exc:
                log.warning("cannot post the conflict event of pod %s/%s: %s", notice.namespace, notice.name, exc)
