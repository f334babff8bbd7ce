"""core/v1 Events about pods, as the API server takes them.

The node agent (memory kills, pauses) and the device plugin (evictions from failed GPUs) report
through `kubectl describe pod`; both build the same object here so the fields that make an Event
show up (involvedObject, source, reporting fields, timestamps) are right in one place.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from tessera.kube.api import KubeObject

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str
    container: str | None = None  # set: the event is about this container of the pod


def pod_event(
    pod: PodRef, *, reason: str, message: str, event_type: EventType, component: str, node_name: str, now: datetime, name_tag: str, serial: int
) -> KubeObject:
    """An Event about `pod`; `name_tag` and `serial` keep names unique per reporter and instant."""
    stamp = now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved: KubeObject = {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
    if pod.container is not None:
        involved["fieldPath"] = f"spec.containers{{{pod.container}}}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod.name}.{name_tag}.{int(now.timestamp() * 1000):x}.{serial}", "namespace": pod.namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": {"component": component, "host": node_name},
        "reportingComponent": component,
        "reportingInstance": node_name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
