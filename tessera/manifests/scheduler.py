"""The second kube-scheduler (`tessera-scheduler`): official image + extender configuration.

Managed control planes (TKE, EKS, GKE...) do not let users add an extender to the cluster's own
scheduler, so Tessera runs the official kube-scheduler image a second time under its own name; the
webhook points pods that ask for `tessera.dev/*` at it. Its `KubeSchedulerConfiguration` delegates
GPU decisions to the Tessera extender:

- `managedResources` lists both Tessera resources with `ignoredByScheduler: false`: gpu-core is
  advertised by the device plugin and gpu-memory is a node extended resource in `status.capacity`,
  so NodeResourcesFit can and should check both before the extender is asked (cheap pre-filter,
  and a second guard against over-commit if the extender's cache lags).
- `nodeCacheCapable: true`: the extender keeps its own node cache, so kube-scheduler sends node
  names only (small requests; the latency target is measured that way).
- `ignorable: false`: if the extender is unreachable the pod stays Pending and is retried; it is
  never placed without a GPU allocation record.
- `bindVerb`: the extender binds, because the allocation must be recorded on the pod before the
  Binding exists (the node side refuses containers without a record).
- `preemptVerb`: without it kube-scheduler never calls /preempt (`SupportsPreemption` is
  `len(preemptVerb) > 0`) and evicts the victims of its own choice, counted as a gpu-core sum
  over the node, which may free nothing on any single GPU.

With a dra pool in the stack, a second entry points at the extender's `/dra/prioritize`
(`tessera.scheduler.dra_scores`): prioritize only, at the same weight, for the pods on dra pools
(they ask for no extended resource, so the first entry is not interested in them):

- no `managedResources`: kube-scheduler then sends it every pod it schedules
  (`pkg/scheduler/extender.go` `IsInterested`: "If no resources are managed, the extender is
  interested in all pods"); a pod without a Tessera claim scores 0 on every node, which changes
  no ranking;
- no filter, bind or preempt: kube-scheduler's DynamicResources plugin decides fit and allocates
  the devices, the default binder binds;
- `ignorable: true`: scores are advice; an unreachable extender must not block dra pods
  (`schedule_one.go` `prioritizeNodes` skips a prioritize error in any case).

`docs/scheduler-extender.md` shows this configuration as `scheduler_doc` renders it from here.
"""
from __future__ import annotations

from typing import Any, Final

import yaml

from tessera.model.contract import EXTENDER_PORT, EXTENDER_SERVICE, GPU_CORE, GPU_MEMORY, PRIORITY_CLASS_CRITICAL, SCHEDULER_NAME
from tessera.manifests.objects import (
    KubeObject,
    component_labels,
    config_map,
    metadata,
    obj,
    policy_rule,
    resources,
    pod_disruption_budget,
    restricted_security_context,
    selector_labels,
    service_account,
    tmp_mount,
    tmp_volume,
)
from tessera.manifests.rbac import cluster_role_binding, namespaced_grant, role_binding
from tessera.manifests.settings import PlatformSettings

COMPONENT: Final = "scheduler"
NAME: Final = SCHEDULER_NAME
CONFIG_KEY: Final = "config.yaml"
CONFIG_DIR: Final = "/etc/kubernetes/tessera-scheduler"
SECURE_PORT: Final = 10259  # kube-scheduler's default secure port: /healthz, /readyz, /metrics
LEASE_NAME: Final = SCHEDULER_NAME
# Node-scoring plugins disabled in our profile: they score CPU/memory balance, which would pull a
# GPU pod away from the node the fragmentation-aware extender prefers. Their filters stay on.
DISABLED_SCORE_PLUGINS: Final = ("NodeResourcesBalancedAllocation", "NodeResourcesFit")


def extender_url(namespace: str) -> str:
    """kube-scheduler appends "/<verb>"; the Service name resolves through the pod's DNS search path."""
    return f"http://{EXTENDER_SERVICE}.{namespace}.svc:{EXTENDER_PORT}"


def go_duration(seconds: float) -> str:
    """A metav1.Duration string ("5s", "1500ms")."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


# Share of the extender's httpTimeout that /preempt may spend deciding: one call carries every
# candidate node (up to 100 or more), and a call that times out fails the pod's preemption.
PREEMPT_BUDGET_SHARE: Final = 0.4


def preempt_budget_seconds(settings: PlatformSettings) -> float:
    """The extender's `--preempt-budget`, derived from the httpTimeout kube-scheduler applies."""
    return round(settings.scheduler.http_timeout_seconds * PREEMPT_BUDGET_SHARE, 3)


DRA_URL_SUFFIX: Final = "/dra"  # the extender serves <urlPrefix>/dra/prioritize


def dra_extender(settings: PlatformSettings) -> dict[str, Any]:
    """The second `extenders[]` entry, for pods on dra pools (module docstring)."""
    return {
        "urlPrefix": extender_url(settings.namespace) + DRA_URL_SUFFIX,
        "prioritizeVerb": "prioritize",
        "weight": settings.scheduler.weight,
        "enableHTTPS": False,
        "httpTimeout": go_duration(settings.scheduler.http_timeout_seconds),
        "nodeCacheCapable": True,
        "ignorable": True,
    }


def scheduler_configuration(settings: PlatformSettings) -> dict[str, Any]:
    """The KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) the second scheduler runs."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        # no pprof endpoints on a component that holds cluster-wide read access
        "enableProfiling": False,
        "leaderElection": {
            "leaderElect": True,
            "resourceLock": "leases",
            "resourceName": LEASE_NAME,
            "resourceNamespace": settings.namespace,
        },
        "profiles": [
            {
                "schedulerName": SCHEDULER_NAME,
                "plugins": {"score": {"disabled": [{"name": p} for p in DISABLED_SCORE_PLUGINS]}},
            }
        ],
        "extenders": [
            {
                "urlPrefix": extender_url(settings.namespace),
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "bindVerb": "bind",
                "preemptVerb": "preempt",
                "weight": settings.scheduler.weight,
                "enableHTTPS": False,
                "httpTimeout": go_duration(settings.scheduler.http_timeout_seconds),
                "nodeCacheCapable": True,
                "ignorable": False,
                "managedResources": [
                    {"name": GPU_CORE, "ignoredByScheduler": False},
                    {"name": GPU_MEMORY, "ignoredByScheduler": False},
                ],
            },
            *([dra_extender(settings)] if settings.dra_pools else []),
        ],
    }


def _rbac(settings: PlatformSettings) -> list[KubeObject]:
    return [
        # What the kube-scheduler binary needs cluster-wide, as the API server defines it for its release.
        cluster_role_binding(f"{NAME}:kube-scheduler", COMPONENT, "system:kube-scheduler", NAME, settings.namespace),
        cluster_role_binding(f"{NAME}:volume-scheduler", COMPONENT, "system:volume-scheduler", NAME, settings.namespace),
        # Delegated authentication for /metrics reads this one ConfigMap in kube-system.
        role_binding(
            f"{NAME}:extension-apiserver-authentication-reader",
            COMPONENT,
            "extension-apiserver-authentication-reader",
            NAME,
            namespace="kube-system",
            sa_namespace=settings.namespace,
        ),
        # system:kube-scheduler may only get/update the lease named "kube-scheduler"; ours has its own name.
        *namespaced_grant(
            f"{NAME}:leader-election",
            COMPONENT,
            [
                policy_rule(["coordination.k8s.io"], ["leases"], ["create"]),
                policy_rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [LEASE_NAME]),
            ],
            NAME,
            settings.namespace,
        ),
    ]


def _pod_spec(settings: PlatformSettings) -> dict[str, Any]:
    def https_probe(path: str, failure_threshold: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": path, "port": SECURE_PORT, "scheme": "HTTPS"},
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": failure_threshold,
        }

    container = {
        "name": "kube-scheduler",
        "image": settings.kube_scheduler_image,
        "imagePullPolicy": settings.pull_policy,
        "command": ["kube-scheduler", f"--config={CONFIG_DIR}/{CONFIG_KEY}", "--v=2"],
        "ports": [{"name": "https", "containerPort": SECURE_PORT, "protocol": "TCP"}],
        "livenessProbe": {**https_probe("/healthz", 3), "initialDelaySeconds": 15},
        "readinessProbe": https_probe("/readyz", 3),
        "resources": resources("100m", "128Mi", "1", "512Mi"),
        "securityContext": restricted_security_context(),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            tmp_mount(),
        ],
    }
    return {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,  # it is an API client
        "priorityClassName": PRIORITY_CLASS_CRITICAL,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": selector_labels(COMPONENT)},
                        },
                    }
                ]
            }
        },
        **settings.pull_secrets_spec(),
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": f"{NAME}-config"}},
            tmp_volume(),
        ],
    }


def build_scheduler_objects(settings: PlatformSettings) -> list[KubeObject]:
    """ServiceAccount, RBAC, configuration, Deployment and disruption budget of the second scheduler."""
    if not settings.sharing_enabled:
        return []
    config_text = yaml.safe_dump(scheduler_configuration(settings), sort_keys=True, default_flow_style=False)
    labels = component_labels(COMPONENT)
    deployment = obj(
        "apps/v1",
        "Deployment",
        metadata(NAME, COMPONENT, settings.namespace),
        spec={
            "replicas": settings.scheduler.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(COMPONENT)},
            # Leader election makes overlapping old and new pods safe; surge keeps one ready at all times.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": dict(sorted(labels.items()))}, "spec": _pod_spec(settings)},
        },
    )
    return [
        service_account(NAME, COMPONENT, settings.namespace),
        *_rbac(settings),
        config_map(f"{NAME}-config", COMPONENT, {CONFIG_KEY: config_text}, settings.namespace),
        deployment,
        pod_disruption_budget(NAME, COMPONENT, settings.namespace, settings.scheduler.replicas),
    ]


