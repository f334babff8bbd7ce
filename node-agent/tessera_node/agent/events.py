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
from tessera.kube.events import PodRef, pod_event
from tessera_node.registry import RegisteredContainer

COMPONENT = "tessera-node-agent"
_log = logging.getLogger(__name__)


class EventType(str, Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


def container_event(
    container: RegisteredContainer, *, reason: str, message: str, event_type: EventType, node_name: str, now: datetime, serial: int
) -> dict[str, Any]:
    """A core/v1 Event about one container of a pod."""
    ref = PodRef(container.namespace, container.pod_name, container.pod_uid, container.container)
    return pod_event(
        ref, reason=reason, message=message, event_type=event_type.value, component=COMPONENT,
        node_name=node_name, now=now, name_tag="tessera", serial=serial,
    )


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
