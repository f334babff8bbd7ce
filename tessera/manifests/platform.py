"""Cluster-level objects every Tessera component relies on: namespace, priority classes, quotas.

Also the ServiceMonitors (separate builder: they need prometheus-operator's CRDs, so they go in
their own component and are only rendered when monitoring asks for them).
"""
from __future__ import annotations

from typing import Final

from tessera.model.contract import (
    PRIORITY_CLASS_CRITICAL,
    PRIORITY_CLASS_OFFLINE,
    PRIORITY_CLASS_ONLINE,
)
from tessera.manifests import extender, node
from tessera.manifests.objects import KubeObject, metadata, obj, selector_labels
from tessera.manifests.pools import build_pools_configmap
from tessera.manifests.settings import NamespaceQuota, PlatformSettings

COMPONENT: Final = "platform"
# Online work preempts offline work and ordinary pods; offline work never preempts anything
# (it runs in the gaps) and sits above default-priority pods only so they do not evict it.
CRITICAL_PRIORITY: Final = 1_000_000_000  # the highest user-definable value
ONLINE_PRIORITY: Final = 100000
OFFLINE_PRIORITY: Final = 1000
QUOTA_NAME: Final = "tessera-gpu"


def _namespace(name: str, pod_security: str) -> KubeObject:
    # The node DaemonSet's agent is privileged, so tessera-system enforces "privileged"; warn and
    # audit at "restricted" make anything looser than intended visible in kubectl output and logs.
    labels = {
        "kubernetes.io/metadata.name": name,
        "pod-security.kubernetes.io/enforce": pod_security,
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return obj("v1", "Namespace", metadata(name, COMPONENT, namespace=None, extra_labels=labels))


def _priority_class(name: str, value: int, preemption: str, description: str) -> KubeObject:
    return obj(
        "scheduling.k8s.io/v1",
        "PriorityClass",
        metadata(name, COMPONENT, namespace=None),
        value=value,
        globalDefault=False,
        preemptionPolicy=preemption,
        description=description,
    )


def priority_classes() -> list[KubeObject]:
    return [
        _priority_class(
            PRIORITY_CLASS_CRITICAL,
            CRITICAL_PRIORITY,
            "PreemptLowerPriority",
            "Tessera's own pods: without them no GPU share is scheduled, isolated or measured.",
        ),
        _priority_class(
            PRIORITY_CLASS_ONLINE,
            ONLINE_PRIORITY,
            "PreemptLowerPriority",
            "Latency-sensitive GPU work (tessera.dev/app-class: online); offline work on the same GPU yields to it.",
        ),
        _priority_class(
            PRIORITY_CLASS_OFFLINE,
            OFFLINE_PRIORITY,
            "Never",
            "Batch GPU work (tessera.dev/app-class: offline); never preempts, paused while online work is active.",
        ),
    ]


def resource_quota(quota: NamespaceQuota) -> KubeObject:
    """Extended resources can only be limited on `requests.` (Kubernetes has no overcommit for them)."""
    return obj("v1", "ResourceQuota", metadata(QUOTA_NAME, COMPONENT, quota.namespace), spec={"hard": dict(sorted(quota.hard.items()))})


def build_platform_objects(settings: PlatformSettings) -> list[KubeObject]:
    """Namespace, PriorityClasses, pools ConfigMap and the per-namespace quotas.

    Quota namespaces are the teams' own and must exist already (Tessera does not own them).
    """
    out: list[KubeObject] = [_namespace(settings.namespace, "privileged"), *priority_classes()]
    if settings.sharing_enabled:
        out.extend(build_pools_configmap(settings))
    out.extend(resource_quota(q) for q in settings.quotas)
    return out


def _service_monitor(name: str, component: str, port: str, settings: PlatformSettings) -> KubeObject:
    return obj(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        metadata(name, component, settings.namespace),
        spec={
            "selector": {"matchLabels": selector_labels(component, name)},
            "namespaceSelector": {"matchNames": [settings.namespace]},
            "endpoints": [{"port": port, "path": "/metrics", "interval": f"{settings.monitoring.scrape_interval_seconds}s"}],
        },
    )


def build_monitoring_objects(settings: PlatformSettings) -> list[KubeObject]:
    """ServiceMonitors for the extender and the node agents (prometheus-operator CRDs required)."""
    if not (settings.monitoring.service_monitors and settings.monitoring.enabled and settings.sharing_enabled):
        return []
    return [
        _service_monitor(extender.NAME, extender.COMPONENT, "http", settings),
        _service_monitor(node.NAME, node.COMPONENT, "metrics", settings),
    ]

