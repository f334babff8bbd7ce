"""Conditional writes of a pod's annotations whose outcome is settled by reading back.

A write that gets no answer, or a 5xx, may have been applied, may be applied later (it is still
in the API server), or may never be. Both writes the extender makes to a pod's record (writing
it at bind, stripping it after the TTL) carry the resourceVersion they were decided on as a
precondition, which makes the question answerable:

- read the pod: the write shows -> applied;
- the pod is at another version without it -> not applied, and it never will be: the
  precondition can no longer hold (resourceVersions of one object never repeat);
- the pod is still at the precondition's version without it -> the write may still be in
  flight: send it again under the same precondition. Success means applied; a 409 means the pod
  moved on (by the first copy landing, or anyone else's write), so read again.

A 409 to the first try is settled the same way, since a 409 after a write that may have landed
(a retried request) would look the same. Only an unreadable pod leaves the outcome unresolved;
the caller keeps the capacity and settles later.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from tessera.kube.api import Conflict, KubeApi, KubeApiError, KubeObject, NotFound, may_have_applied
from tessera.scheduler.pod_records import resource_version

_ROUNDS: Final = 3  # read-and-resend rounds before an outcome is left unresolved


class Outcome(str, Enum):
    APPLIED = "applied"
    NOT_APPLIED = "not_applied"
    UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class WriteResult:
    outcome: Outcome
    rv: str | None = None  # the pod's resourceVersion once the write is applied
    reason: str = ""
    ambiguous: bool = False  # the first answer did not say whether the write was applied
    pod: KubeObject | None = None  # the version read while settling (None: none read)
    read_at: float | None = None  # monotonic time that read began


def conditional_patch(
    api: KubeApi,
    namespace: str,
    name: str,
    annotations: Mapping[str, str | None],
    *,
    precondition: str | None,
    shows: Callable[[KubeObject], bool],
    monotonic: Callable[[], float],
) -> WriteResult:
    """Merge-patch `annotations` onto the pod if it is still at `precondition`; `shows(pod)`:
    whether a version of the pod has the write applied."""
    try:
        pod = api.patch_pod_annotations(namespace, name, annotations, resource_version=precondition)
        return WriteResult(Outcome.APPLIED, resource_version(pod))
    except NotFound:
        return WriteResult(Outcome.NOT_APPLIED, reason="the pod was deleted")
    except Conflict:
        ambiguous = False
    except KubeApiError as exc:
        if not may_have_applied(exc):
            return WriteResult(Outcome.NOT_APPLIED, reason=str(exc))
        ambiguous = True
    for _ in range(_ROUNDS):
        read_at = monotonic()
        try:
            pod = api.get_pod(namespace, name)
        except NotFound:
            return WriteResult(Outcome.NOT_APPLIED, reason="the pod was deleted", ambiguous=ambiguous)
        except KubeApiError as exc:
            return WriteResult(Outcome.UNRESOLVED, reason=f"cannot read the pod back: {exc}", ambiguous=ambiguous)
        if shows(pod):
            return WriteResult(Outcome.APPLIED, resource_version(pod), ambiguous=ambiguous, pod=pod, read_at=read_at)
        if resource_version(pod) != precondition:
            return WriteResult(Outcome.NOT_APPLIED, reason="the pod changed meanwhile", ambiguous=ambiguous, pod=pod, read_at=read_at)
        try:
            pod = api.patch_pod_annotations(namespace, name, annotations, resource_version=precondition)
            return WriteResult(Outcome.APPLIED, resource_version(pod), ambiguous=ambiguous)
        except NotFound:
            return WriteResult(Outcome.NOT_APPLIED, reason="the pod was deleted", ambiguous=ambiguous)
        except Conflict:
            continue
        except KubeApiError as exc:
            if not may_have_applied(exc):
                return WriteResult(Outcome.NOT_APPLIED, reason=str(exc), ambiguous=ambiguous)
            ambiguous = True
    return WriteResult(Outcome.UNRESOLVED, reason="the API server did not settle the write", ambiguous=ambiguous)
