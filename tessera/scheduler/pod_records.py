"""What the extender knows about each pod holding GPU capacity, and the records in conflict.

The allocation record on the pod (`tessera.dev/allocation`) is the truth; an entry here is the
extender's reservation standing for one record (or, during a bind, for the record about to be
written). Capacity is given back only when the API server shows the record gone or the pod gone,
never because a call failed (docs/scheduler-extender.md, "Failure model").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Final

from tessera.alloc import PodRequest
from tessera.alloc.model import PodUid
from tessera.kube.api import KubeObject
from tessera.model.contract import Allocation


class Holding(Enum):
    IN_FLIGHT = "in-flight"  # a bind in this process owns the pod; watch events wait for it
    UNCONFIRMED = "unconfirmed"  # a record write got no clear answer; kept until a read settles it
    ASSUMED = "assumed"  # recorded, not bound (after a restart, or a failed Binding)
    BOUND = "bound"


class ConflictReason(str, Enum):
    """Why a record cannot simply be counted (the `reason` label of the conflicts metric)."""

    OVERCOMMIT = "overcommit"  # counted, and with the others on a GPU more than 100 % of it
    UNKNOWN_GPU = "unknown_gpu"  # names a GPU the node does not report: nothing to count it on
    UNREADABLE = "unreadable"  # the annotation does not parse


@dataclass
class PodEntry:
    """One reservation. `record` is the annotation text it stands for: the pod's, or the one a
    bind in flight is writing, so "is this record ours" is one string comparison."""

    namespace: str
    name: str
    node: str
    holding: Holding
    assumed_at: float  # epoch seconds
    request: PodRequest
    allocation: Allocation
    record: str
    priority: int = 0  # spec.priority: who may preempt it
    started_at: float = math.inf  # status.startTime, epoch seconds; inf until kubelet starts it
    counted: bool = True  # False: parked, its node or a GPU it names is not in the inventory
    # resourceVersion our own last write returned, until the watch delivers it: watch events
    # before it are older than what this process wrote and must not undo it
    awaiting: str | None = None
    written_at: float = -math.inf  # monotonic time our last write to the pod was answered (or failed unclearly)
    # UNCONFIRMED: the resourceVersion the unanswered write was conditioned on; once the pod is
    # seen at another version (by a read that began after the write), the write can never land
    precondition: str | None = None
    # IN_FLIGHT: pod versions delivered meanwhile (with the read's start, None from the watch),
    # applied in order once the bind lets go; the watch may pass our write before the bind ends.
    # Bounded by the bind's own API timeouts.
    held_back: list[tuple[KubeObject, float | None]] = field(default_factory=list)


@dataclass(frozen=True)
class HeldPod:
    """A pod holding GPU capacity on a node, as preemption sees it."""

    uid: str
    priority: int
    started_at: float
    gpus: frozenset[int]
    bound: bool  # bound pods are in kube-scheduler's snapshot of the node; others may not be


@dataclass(frozen=True)
class Settle:
    """A reservation the leader must settle against the API server: an assumed one past its TTL
    (strip the record and release it), or one whose record write got no clear answer."""

    namespace: str
    name: str
    uid: str
    node: str
    record: str
    holding: Holding
    precondition: str | None


@dataclass(frozen=True)
class ConflictNotice:
    """A record newly found in conflict, for the log, an Event on the pod and the metric."""

    namespace: str
    name: str
    uid: str
    node: str
    reason: ConflictReason
    detail: str


TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


def rfc3339(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


def parse_record(text: str | None) -> Allocation | None:
    """The allocation record in `text`, None when absent or unreadable."""
    if not text:
        return None
    try:
        return Allocation.from_json(text)
    except (ValueError, KeyError, TypeError):
        return None


def pod_uid(pod: KubeObject) -> PodUid:
    return PodUid(str((pod.get("metadata") or {}).get("uid", "")))


def resource_version(pod: KubeObject) -> str | None:
    value = (pod.get("metadata") or {}).get("resourceVersion")
    return str(value) if value is not None else None
