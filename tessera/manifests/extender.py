"""The scheduler extender: `tessera scheduler serve` behind a ClusterIP Service.

One replica, by design. The extender keeps a cache of nodes and allocations (rebuilt from pod
annotations at start) and serialises binds in-process; that lock is what guarantees no two pods
get the same GPU capacity. Two active replicas would each hold a lock the other cannot see, so:

- `replicas: 1` with the `Recreate` strategy: the old pod is gone before the new one starts, even
  during an upgrade (a RollingUpdate surge would briefly run two binders);
- the PodDisruptionBudget allows the one pod to be evicted (`maxUnavailable: 1`), so node drains
  never hang on it. While it restarts, kube-scheduler's calls fail, `ignorable: false` keeps
  Tessera pods Pending, and they are scheduled as soon as the new pod has rebuilt its cache;
  no pod is ever placed without an allocation record.
"""
from __future__ import annotations

from typing import Any, Final

from tessera.model.contract import EXTENDER_PORT, EXTENDER_SERVICE, PRIORITY_CLASS_CRITICAL
from tessera.manifests.objects import (
    KubeObject,
    component_labels,
    env,
    http_probe,
    metadata,
    obj,
    pod_disruption_budget,
    policy_rule,
    resources,
    restricted_security_context,
    selector_labels,
    service_account,
    tmp_mount,
    tmp_volume,
)
from tessera.manifests.pools import pools_env, pools_mount, pools_volume
from tessera.manifests.rbac import cluster_grant
from tessera.manifests.scheduler import preempt_budget_seconds
from tessera.manifests.settings import PlatformSettings

COMPONENT: Final = "extender"
NAME: Final = EXTENDER_SERVICE
REPLICAS: Final = 1  # see the module docstring: one in-process bind lock


def extender_command(settings: PlatformSettings) -> list[str]:
    """The container command; the listen address must be reachable from the scheduler pods."""
    return [
        "tessera",
        "scheduler",
        "serve",
        "--bind-address",
        "0.0.0.0",
        "--port",
        str(EXTENDER_PORT),
        "--placement",
        settings.scheduler.placement,
        "--log-level",
        settings.scheduler.log_level.upper(),
        "--preempt-budget",
        str(preempt_budget_seconds(settings)),
    ]


def extender_rules() -> list[dict[str, Any]]:
    """Exactly the API calls `tessera.kube.client` makes for the extender."""
    return [
        # cache of pods (allocation records) and bind-time annotations
        policy_rule([""], ["pods"], ["get", "list", "watch", "patch"]),
        policy_rule([""], ["pods/binding"], ["create"]),
        # GPU inventory comes from the node annotation written by the node DaemonSet
        policy_rule([""], ["nodes"], ["get", "list", "watch"]),
        # the per-pod allocation ConfigMap lives in the pod's namespace; the pod owns it through an
        # ownerReference (blockOwnerDeletion unset), so garbage collection deletes it: no delete verb
        policy_rule([""], ["configmaps"], ["create", "get", "update"]),
        policy_rule([""], ["events"], ["create", "patch"]),
        policy_rule(["events.k8s.io"], ["events"], ["create", "patch"]),
    ]


def _deployment(settings: PlatformSettings) -> KubeObject:
    port = {"name": "http", "containerPort": EXTENDER_PORT, "protocol": "TCP"}
    container = {
        "name": "extender",
        "image": settings.tessera_image,
        "imagePullPolicy": settings.pull_policy,
        "command": extender_command(settings),
        "env": env(pools_env()),
        "ports": [port],
        # /healthz answers 503 until the cache is in sync: allow up to 5 minutes for a first list of a
        # large cluster before liveness applies
        "startupProbe": http_probe("/healthz", "http", period_seconds=5, failure_threshold=60),
        "livenessProbe": http_probe("/healthz", "http", failure_threshold=6),
        "readinessProbe": http_probe("/healthz", "http", period_seconds=5),
        "resources": resources("200m", "256Mi", "2", "2Gi"),
        "securityContext": restricted_security_context(),
        "volumeMounts": [pools_mount(), tmp_mount()],
    }
    pod_spec = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,  # it is an API client
        "priorityClassName": PRIORITY_CLASS_CRITICAL,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": 30,
        **settings.pull_secrets_spec(),
        "containers": [container],
        "volumes": [pools_volume(), tmp_volume()],
    }
    labels = component_labels(COMPONENT, NAME)
    return obj(
        "apps/v1",
        "Deployment",
        metadata(NAME, COMPONENT, settings.namespace),
        spec={
            "replicas": REPLICAS,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(COMPONENT, NAME)},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": dict(sorted(labels.items()))}, "spec": pod_spec},
        },
    )


def _service(settings: PlatformSettings) -> KubeObject:
    annotations = {}
    if settings.monitoring.enabled:
        annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(EXTENDER_PORT), "prometheus.io/path": "/metrics"}
    return obj(
        "v1",
        "Service",
        metadata(NAME, COMPONENT, settings.namespace, annotations=annotations),
        spec={
            "type": "ClusterIP",
            "selector": selector_labels(COMPONENT, NAME),
            "ports": [{"name": "http", "port": EXTENDER_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    )


def build_extender_objects(settings: PlatformSettings) -> list[KubeObject]:
    """ServiceAccount, RBAC, Deployment, Service and disruption budget of the extender."""
    if not settings.sharing_enabled:
        return []
    return [
        service_account(NAME, COMPONENT, settings.namespace),
        *cluster_grant(NAME, COMPONENT, extender_rules(), NAME, settings.namespace),
        _deployment(settings),
        _service(settings),
        pod_disruption_budget(NAME, COMPONENT, settings.namespace, REPLICAS),
    ]
