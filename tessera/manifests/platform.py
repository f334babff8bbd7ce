"""Cluster-level objects every Tessera component relies on: namespaces, priority classes, quotas.

The namespaces are Tessera's own and, with `monitoring.mode: kube-prometheus-stack`, the
monitoring stack's (its Helm release needs it before it installs). ServiceMonitors, alert rules and
dashboards are built by `tessera.manifests.monitoring`.
"""
from __future__ import annotations

from typing import Final

from tessera.model.contract import (
    PRIORITY_CLASS_CRITICAL,
    PRIORITY_CLASS_OFFLINE,
    PRIORITY_CLASS_ONLINE,
)
from tessera.manifests.objects import KubeObject, metadata, obj
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
    if settings.monitoring.stack_namespace is not None:
        # node-exporter uses the host's network, PID namespace and file system
        out.append(_namespace(settings.monitoring.stack_namespace, "privileged"))
    if settings.sharing_enabled:
        out.extend(build_pools_configmap(settings))
    out.extend(resource_quota(q) for q in settings.quotas)
    return out
