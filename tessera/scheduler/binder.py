"""Bind: choose GPUs, reserve them, record the decision on the pod, create the Binding.

Order of effects, and why it is safe:

1. Reserve in the cache under the state lock (no two pods get the same capacity in this process).
2. Write the allocation ConfigMap (harmless on its own: nothing reads it before the pod is bound).
3. Patch the pod annotations with the resourceVersion read at the start (optimistic
   concurrency: a concurrent writer makes us re-read and decide again instead of overwriting).
   From here the decision survives a restart: the state is rebuilt from this record.
4. POST the Binding. A 409 "already assigned" is success when it names our node (a retry whose
   first answer was lost), failure otherwise.

kube-scheduler retries a failed bind by scheduling the pod again: a retry that finds the pod
annotated for the same node re-uses that record (same GPUs, no second reservation); one for a
different node releases the old record first. Binds of one pod are serialised by a striped lock,
binds of different pods run concurrently and meet only at the state lock.
"""
from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from tessera.alloc import FitFailure, InvalidRequest, PodRequest, pod_request_from_k8s
from tessera.model.contract import ANNOTATION_ALLOCATION, ANNOTATION_ALLOCATION_CONFIGMAP, ANNOTATION_GPU_INDEX_PREFIX, Allocation
from tessera.kube.api import Conflict, KubeApi, KubeApiError, KubeObject, NotFound
from tessera.model.allocation_record import configmap_body, configmap_data, configmap_name, uses_mps
from tessera.scheduler.extender_types import ExtenderBindingArgs, ExtenderBindingResult
from tessera.scheduler.metrics import BindOutcome, ExtenderMetrics
from tessera.scheduler.state import Expired, SchedulerState, pod_priority

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BindSettings:
    """How bind retries.

    conflict_retries: default 5: re-read the pod and decide again this many times when the API
        server answers 409 to the annotation patch (someone else updated the pod meanwhile).
    lock_stripes: default 64: binds of one pod are serialised by one of this many locks (bounded
        memory, little contention between different pods).
    """

    conflict_retries: int = 5
    lock_stripes: int = 64


class BindFailed(Exception):
    def __init__(self, outcome: BindOutcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def rfc3339(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Binder:
    def __init__(
        self,
        api: KubeApi,
        state: SchedulerState,
        metrics: ExtenderMetrics,
        settings: BindSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = api
        self._state = state
        self._metrics = metrics
        self._settings = settings or BindSettings()
        self._clock = clock
        self._locks = [threading.Lock() for _ in range(self._settings.lock_stripes)]

    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        key = args.pod_uid or f"{args.pod_namespace}/{args.pod_name}"
        with self._locks[zlib.crc32(key.encode()) % len(self._locks)]:
            try:
                outcome = self._bind(args)
            except BindFailed as exc:
                self._metrics.binds.labels(exc.outcome.value).inc()
                log.info("bind %s/%s to %s failed: %s", args.pod_namespace, args.pod_name, args.node, exc)
                return ExtenderBindingResult(error=str(exc))
        self._metrics.binds.labels(outcome.value).inc()
        return ExtenderBindingResult()

    def _bind(self, args: ExtenderBindingArgs) -> BindOutcome:
        request: PodRequest | None = None
        for _ in range(self._settings.conflict_retries + 1):
            pod = self._read_pod(args)
            bound_to = (pod.get("spec") or {}).get("nodeName")
            if bound_to:
                if bound_to != args.node:
                    raise BindFailed(BindOutcome.CONFLICT, f"pod is already bound to node {bound_to}")
                self._state.apply_pod(pod)  # a retry after a bind whose answer was lost
                return BindOutcome.ALREADY_BOUND
            try:
                request = pod_request_from_k8s(pod)
            except InvalidRequest as exc:
                raise BindFailed(BindOutcome.ERROR, str(exc)) from None
            allocation, reused = self._decide(pod, request, args.node)
            try:
                self._record(pod, allocation)
            except Conflict:
                self._metrics.conflicts.inc()
                if not reused:
                    self._state.finish_bind(request.uid, bound=False)
                continue
            except KubeApiError as exc:
                self._state.finish_bind(request.uid, bound=False)
                raise BindFailed(BindOutcome.ERROR, f"cannot record the allocation: {exc}") from None
            self._create_binding(args, pod, request)
            return BindOutcome.REUSED if reused else BindOutcome.BOUND
        if request is not None:
            self._state.keep_assumed(request.uid)  # whatever is recorded now is left to the TTL
        raise BindFailed(BindOutcome.CONFLICT, "the pod kept changing while binding; kube-scheduler will retry")

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

    def _decide(self, pod: KubeObject, request: PodRequest, node: str) -> tuple[Allocation, bool]:
        """(allocation, re-used an existing record?) with the capacity reserved in the cache."""
        text = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ALLOCATION)
        existing = _parse(text)
        priority = pod_priority(pod)
        if existing is not None and existing.node == node and self._state.adopt_for_bind(request, existing, priority=priority):
            return existing, True
        # kube-scheduler chose another node than the one recorded (or the record is stale):
        # what the pod held is given back before it takes the new share
        self._state.release_pod(request.uid)
        placement = self._state.reserve_for_bind(request, node, priority=priority)
        if isinstance(placement, FitFailure):
            raise BindFailed(BindOutcome.NO_FIT, f"pod does not fit on node {node}: {placement.value}")
        with self._state.lock:
            return self._state.cluster.to_allocation(placement, rfc3339(self._clock())), False

    def _record(self, pod: KubeObject, allocation: Allocation) -> None:
        meta = pod["metadata"]
        namespace = str(meta.get("namespace", "default"))
        name = configmap_name(pod)
        with self._state.lock:
            node = self._state.cluster.nodes.get(allocation.node)
            memory = {g.index: g.memory_mib for g in node.gpus} if node is not None else {}
            sm_counts = {g.index: g.sm_count for g in node.gpus} if node is not None else {}
            mps = node is not None and uses_mps(node.labels)
        body = configmap_body(pod, name, configmap_data(allocation, memory, mps=mps, sm_counts=sm_counts))
        try:
            self._api.create_configmap(namespace, body)
        except Conflict:
            self._api.replace_configmap(namespace, name, body)  # an earlier attempt's, or the webhook's
        annotations = dict(allocation.pod_annotations())
        if not (meta.get("annotations") or {}).get(ANNOTATION_ALLOCATION_CONFIGMAP):
            annotations[ANNOTATION_ALLOCATION_CONFIGMAP] = name
        self._api.patch_pod_annotations(namespace, str(meta["name"]), annotations, resource_version=str(meta.get("resourceVersion")))

    def _create_binding(self, args: ExtenderBindingArgs, pod: KubeObject, request: PodRequest) -> None:
        uid = str(pod["metadata"].get("uid", ""))
        try:
            self._api.bind_pod(args.pod_namespace, args.pod_name, uid, args.node)
        except Conflict as exc:
            try:
                again = self._api.get_pod(args.pod_namespace, args.pod_name)
            except KubeApiError:
                again = {}
            if (again.get("spec") or {}).get("nodeName") == args.node:
                self._state.finish_bind(request.uid, bound=True)
                return
            self._state.finish_bind(request.uid, bound=False)
            raise BindFailed(BindOutcome.CONFLICT, f"binding refused: {exc.message}") from None
        except NotFound:
            self._state.finish_bind(request.uid, bound=False)
            raise BindFailed(BindOutcome.ERROR, "pod or node disappeared before the binding") from None
        except KubeApiError as exc:
            # annotated but not bound: keep the reservation; a retry re-uses it, the TTL frees it
            self._state.keep_assumed(request.uid)
            raise BindFailed(BindOutcome.ERROR, f"cannot create the binding: {exc}") from None
        self._state.finish_bind(request.uid, bound=True)

    # --- TTL --------------------------------------------------------------------------------------
    def strip_expired(self, expired: Expired) -> None:
        """Remove an expired record from its pod, unless the pod moved on (bound or re-bound)."""
        try:
            pod = self._api.get_pod(expired.namespace, expired.name)
        except KubeApiError:
            return
        meta = pod["metadata"]
        record = _parse((meta.get("annotations") or {}).get(ANNOTATION_ALLOCATION))
        if meta.get("uid") != expired.uid or (pod.get("spec") or {}).get("nodeName") or record is None or record.node != expired.node:
            return
        if self._state.holding(expired.uid) is not None:
            return  # a new bind took it meanwhile
        stale = {k: None for k in Allocation(expired.node, "").pod_annotations()} | {
            k: None for k in (meta.get("annotations") or {}) if k.startswith(ANNOTATION_GPU_INDEX_PREFIX)
        }
        try:
            self._api.patch_pod_annotations(expired.namespace, expired.name, stale, resource_version=str(meta.get("resourceVersion")))
            self._metrics.expired.inc()
        except KubeApiError as exc:
            log.info("could not strip the expired allocation of %s/%s: %s", expired.namespace, expired.name, exc)


def _parse(text: str | None) -> Allocation | None:
    if not text:
        return None
    try:
        return Allocation.from_json(text)
    except (ValueError, KeyError, TypeError):
        return None
