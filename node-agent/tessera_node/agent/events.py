"""Kubernetes Events about containers, as plain API objects, and a sink that never raises.

Events are how a user notices the agent acted (`kubectl describe pod` shows them): a memory
warning or kill, an offline pause or resume.
"""
from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from tessera.kube.api import KubeApi, KubeApiError
from tessera_node.agent.registry import RegisteredContainer

COMPONENT = "tessera-node-agent"
_log = logging.getLogger(__name__)


class EventType(str, Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


def container_event(
    container: RegisteredContainer, *, reason: str, message: str, event_type: EventType, node_name: str, now: datetime, serial: int
) -> dict[str, Any]:
    """A core/v1 Event about one container of a pod."""
    stamp = now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{container.pod_name}.tessera.{int(now.timestamp() * 1000):x}.{serial}",
            "namespace": container.namespace,
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": container.namespace,
            "name": container.pod_name,
            "uid": container.pod_uid,
            "fieldPath": f"spec.containers{{{container.container}}}",
        },
        "reason": reason,
        "message": message,
        "type": event_type.value,
        "source": {"component": COMPONENT, "host": node_name},
        "reportingComponent": COMPONENT,
        "reportingInstance": node_name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


@dataclass
class EventSink:
    """Posts events; an API failure is logged and counted, never stops enforcement."""

    kube: KubeApi | None
    node_name: str
    failures: int = 0
    _serial: itertools.count = field(default_factory=itertools.count)  # type: ignore[type-arg]
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def emit(self, container: RegisteredContainer, reason: str, message: str, event_type: EventType) -> None:
        _log.info("%s %s/%s/%s: %s", reason, container.namespace, container.pod_name, container.container, message)
        if self.kube is None:
            return
        with self._lock:
            serial = next(self._serial)
        body = container_event(
            container, reason=reason, message=message, event_type=event_type,
            node_name=self.node_name, now=datetime.now(timezone.utc), serial=serial,
        )
        try:
            self.kube.create_event(container.namespace, body)
        except (KubeApiError, OSError) as exc:
            self.failures += 1
            _log.warning("could not post event %s for %s/%s: %s", reason, container.namespace, container.pod_name, exc)
