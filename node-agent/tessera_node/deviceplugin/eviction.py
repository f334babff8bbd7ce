"""Pods on an unhealthy GPU are evicted so their controllers reschedule them (MISSION S7).

Taking a GPU out of scheduling (Unhealthy devices, the node annotation) only protects new pods;
the ones already running on it keep failing. When the health tracker marks a GPU unhealthy, the
plugin evicts every pod whose allocation record (`tessera.dev/allocation`) places one of its
containers on that GPU of this node, through the Eviction API so PodDisruptionBudgets hold:

- a 429 (the budget has no disruption left) is retried with exponential backoff, from
  `retry_initial_s` up to `retry_max_s`, for as long as the GPU stays unhealthy;
- a pod that is gone (404) or was replaced by another of the same name (409 on the UID
  precondition) is dropped; other API errors are retried like a 429;
- pods on other GPUs, of other nodes, finished or already terminating are never touched;
- if the GPU recovers first, pending evictions of its pods are cancelled.

While a GPU stays unhealthy its pods are listed again every `retry_initial_s`, so a pod bound to
it just before it failed is found too. Each evicted pod gets a Warning Event (reason
`TesseraGPUUnhealthy`) naming the GPU and why it is unhealthy, so `kubectl describe` explains it.

`victims` is pure; `Evictor` holds the retry state and is driven by the plugin's supervisor loop
with the current time (no thread, no sleep).
"""
from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final

from tessera.model.contract import ANNOTATION_ALLOCATION, Allocation, NodeGpu
from tessera.kube.api import Conflict, KubeApi, KubeApiError, KubeObject, NotFound
from tessera.kube.events import PodRef, pod_event

log = logging.getLogger("tessera.deviceplugin.eviction")

EVENT_REASON: Final = "TesseraGPUUnhealthy"
COMPONENT: Final = "tessera-device-plugin"
TOO_MANY_REQUESTS: Final = 429  # the Eviction API's answer when a PodDisruptionBudget forbids it now


@dataclass(frozen=True)
class EvictionSettings:
    """What happens to pods running on a GPU that became unhealthy."""

    enabled: bool = True
    """Evict them (`--evict-on-unhealthy`). Default on: a pod left on a failed GPU never recovers
    by itself, and eviction (unlike deletion) still honours PodDisruptionBudgets."""
    retry_initial_s: float = 5.0
    """First wait after a refused eviction, and how often an unhealthy GPU's pods are listed
    again. Default 5 s: PDB controllers update disruptionsAllowed within seconds of a replacement
    becoming ready."""
    retry_max_s: float = 60.0
    """Longest wait between retries (the wait doubles). Default 60 s: a budget may hold a pod for
    minutes while its replacement starts; polling faster only loads the API server."""


@dataclass(frozen=True)
class Victim:
    """A pod to evict: which one exactly (UID), and the GPU it is leaving."""

    namespace: str
    name: str
    uid: str
    gpu: NodeGpu


def _allocated_uuids(pod: Mapping[str, Any], node_name: str) -> set[str]:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ALLOCATION)
    if not text:
        return set()
    try:
        allocation = Allocation.from_json(text)
    except (ValueError, KeyError, TypeError):
        return set()  # a record we cannot read places nothing; PreStartContainer refused it anyway
    if allocation.node != node_name:
        return set()
    return {share.uuid for shares in allocation.containers.values() for share in shares}


def victims(pods: Iterable[Mapping[str, Any]], node_name: str, gpu: NodeGpu) -> list[Victim]:
    """Running or pending pods of this node whose allocation record names `gpu` (by UUID, which
    survives a reboot that renumbers GPUs)."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node_name or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if gpu.uuid in _allocated_uuids(pod, node_name):
            out.append(Victim(str(meta.get("namespace", "default")), str(meta["name"]), str(meta.get("uid", "")), gpu))
    return out


def eviction_event(victim: Victim, *, message: str, node_name: str, now: datetime, serial: int) -> KubeObject:
    """A core/v1 Warning Event on the evicted pod."""
    return pod_event(
        PodRef(victim.namespace, victim.name, victim.uid), reason=EVENT_REASON, message=message, event_type="Warning",
        component=COMPONENT, node_name=node_name, now=now, name_tag="tessera-evict", serial=serial,
    )


@dataclass
class _Pending:
    victim: Victim
    why: str
    next_at: float
    attempts: int = 0


@dataclass
class _Unhealthy:
    gpu: NodeGpu
    why: str
    next_scan_at: float


@dataclass
class Evictor:
    """Evicts pods of unhealthy GPUs with backoff. Call `gpu_unhealthy` / `gpu_healthy` on
    health changes and `step(now)` every supervisor tick. Not thread-safe (one loop drives it)."""

    settings: EvictionSettings
    kube: KubeApi
    node_name: str
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    evicted: list[Victim] = field(default_factory=list)  # for logs and tests
    _unhealthy: dict[str, _Unhealthy] = field(default_factory=dict)  # by GPU UUID
    _pending: dict[str, _Pending] = field(default_factory=dict)  # by pod UID
    _done: set[str] = field(default_factory=set)  # pod UIDs evicted or gone, while their GPU is unhealthy
    _serial: itertools.count = field(default_factory=itertools.count)  # type: ignore[type-arg]

    def gpu_unhealthy(self, gpu: NodeGpu, why: str, now: float) -> None:
        if self.settings.enabled:
            self._unhealthy[gpu.uuid] = _Unhealthy(gpu, why, now)

    def gpu_healthy(self, gpu_uuid: str) -> None:
        if self._unhealthy.pop(gpu_uuid, None) is None:
            return
        for uid in [u for u, p in self._pending.items() if p.victim.gpu.uuid == gpu_uuid]:
            log.info("GPU %s recovered: not evicting %s/%s", gpu_uuid, self._pending[uid].victim.namespace, self._pending[uid].victim.name)
            del self._pending[uid]
        if not self._unhealthy:
            self._done.clear()

    def reset(self) -> None:
        """Forget every GPU and pending eviction: the GPUs were read afresh (after a MIG change)
        and all start healthy."""
        self._unhealthy.clear()
        self._pending.clear()
        self._done.clear()

    @property
    def pending(self) -> list[Victim]:
        return [p.victim for p in self._pending.values()]

    def step(self, now: float) -> None:
        self._scan(now)
        for uid, pending in list(self._pending.items()):
            if now >= pending.next_at:
                self._attempt(uid, pending, now)

    def _scan(self, now: float) -> None:
        due = [u for u in self._unhealthy.values() if now >= u.next_scan_at]
        if not due:
            return
        try:
            pods = self.kube.list_pods(node_name=self.node_name)
        except KubeApiError as exc:
            log.warning("cannot list pods of node %s to evict those on unhealthy GPUs: %s; retrying", self.node_name, exc)
            pods = None
        for unhealthy in due:
            unhealthy.next_scan_at = now + self.settings.retry_initial_s
            for victim in victims(pods or [], self.node_name, unhealthy.gpu):
                if victim.uid not in self._pending and victim.uid not in self._done:
                    self._pending[victim.uid] = _Pending(victim, unhealthy.why, now)

    def _attempt(self, uid: str, pending: _Pending, now: float) -> None:
        victim, gpu = pending.victim, pending.victim.gpu
        what = f"GPU {gpu.index} ({gpu.uuid}) is unhealthy ({pending.why})"
        pending.attempts += 1
        try:
            self.kube.evict_pod(victim.namespace, victim.name, victim.uid or None)
        except (NotFound, Conflict):
            self._finish(uid)  # gone, or a new pod of the same name that is not on this GPU's record
            return
        except KubeApiError as exc:
            wait = min(self.settings.retry_max_s, self.settings.retry_initial_s * 2 ** (pending.attempts - 1))
            pending.next_at = now + wait
            blocked = exc.status == TOO_MANY_REQUESTS
            log.warning("cannot evict %s/%s from GPU %d yet (%s); retrying in %.0f s", victim.namespace, victim.name, gpu.index, exc, wait)
            if pending.attempts == 1:
                cause = "a PodDisruptionBudget does not allow it yet" if blocked else f"the API refused ({exc.status})"
                self._event(victim, f"{what}; eviction delayed: {cause}; retrying until it is allowed or the GPU recovers")
            return
        self._finish(uid)
        self.evicted.append(victim)
        log.warning("evicted %s/%s: %s", victim.namespace, victim.name, what)
        self._event(victim, f"{what}; evicted the pod so its controller reschedules it onto a healthy GPU")

    def _finish(self, uid: str) -> None:
        self._pending.pop(uid, None)
        self._done.add(uid)

    def _event(self, victim: Victim, message: str) -> None:
        body = eviction_event(victim, message=message, node_name=self.node_name, now=self.wall(), serial=next(self._serial))
        try:
            self.kube.create_event(victim.namespace, body)
        except KubeApiError as exc:  # an event is an explanation, never a reason to stop evicting
            log.warning("could not post event %s for %s/%s: %s", EVENT_REASON, victim.namespace, victim.name, exc)
