"""Scheduled re-partitioning: one CronJob per `{cron, layout}` entry of each pool, a reconcile
CronJob per pool for nodes that joined since, the plan they read, and their narrow permissions.

RBAC cannot restrict a verb by label or by field, and nodes are cluster-scoped, so the job's
ClusterRole grants `get`/`list`/`patch` on nodes (plus `list` on pods, to wait for GPU pods to
finish). A ValidatingAdmissionPolicy narrows what that identity can actually change: only the
layout labels, only on nodes of the pools that have a schedule, never the node's spec (no cordon,
no taints). That is the least privilege Kubernetes can express for "relabel these nodes".
"""
from __future__ import annotations

import hashlib
from typing import Any, Final

from tessera.model.stack import StackConfig
from tessera.model.contract import (
    LABEL_LAYOUT,
    LABEL_MAX_SHARES_PER_GPU,
    LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG,
    LABEL_NVIDIA_MIG_CONFIG,
    LABEL_POOL,
)
from tessera.manifests.kube_version import has_validating_admission_policy
from tessera.manifests.objects import (
    KubeObject,
    component_labels,
    config_map,
    metadata,
    obj,
    policy_rule,
    resources,
    restricted_security_context,
    service_account,
)
from tessera.manifests.rbac import cluster_grant
from tessera.repartition import LABEL_MIG_CONFIG_STATE, PoolPlan, ScheduledLayout, layout_labels, plan_document

COMPONENT: Final = "repartition"
NAME: Final = "tessera-repartition"
PLAN_KEY: Final = "plan.json"
PLAN_DIR: Final = "/etc/tessera/repartition"
PLAN_FILE: Final = f"{PLAN_DIR}/{PLAN_KEY}"
CRONJOB_NAME_MAX: Final = 52  # the CronJob controller appends an 11-character suffix to Job names
RECONCILE_SCHEDULE: Final = "*/10 * * * *"
# Labels the job may change; the admission policy refuses any other label change by its identity.
MANAGED_LABELS: Final = (
    LABEL_LAYOUT,
    LABEL_MAX_SHARES_PER_GPU,
    LABEL_MIG_CONFIG_STATE,
    LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG,
    LABEL_NVIDIA_MIG_CONFIG,
)


def repartition_plans(config: StackConfig) -> list[PoolPlan]:
    """Every pool with a schedule, with the labels each of its layouts sets."""
    plans = []
    for pool in sorted(config.node_pools, key=lambda p: p.name):
        if not pool.repartition:
            continue
        layouts = tuple(
            ScheduledLayout(
                index=i,
                cron=entry.cron,
                timezone=entry.timezone,
                labels=layout_labels(pool.kind, pool.name, i, entry.layout),
                name=entry.name,
            )
            for i, entry in enumerate(pool.repartition)
        )
        plans.append(PoolPlan(pool.name, pool.kind, layouts))
    return plans


def cronjob_name(pool: str, suffix: str) -> str:
    """`tessera-rp-<pool>-<suffix>`, shortened with a hash when the pool name is long."""
    name = f"tessera-rp-{pool}-{suffix}"
    if len(name) <= CRONJOB_NAME_MAX:
        return name
    digest = hashlib.sha256(pool.encode()).hexdigest()[:6]
    keep = CRONJOB_NAME_MAX - len(f"tessera-rp--{digest}-{suffix}")
    return f"tessera-rp-{pool[:keep].rstrip('-')}-{digest}-{suffix}"


def _job_timeout_s(plan: PoolPlan, config: StackConfig) -> int:
    """MIG pools go node by node (wait for idle GPUs + reconfigure); the others take seconds."""
    if not plan.one_node_at_a_time:
        return 600
    nodes = max(config.pool(plan.pool).max_size, 1)
    return min(nodes * 45 * 60, 12 * 3600)


def _cronjob(config: StackConfig, plan: PoolPlan, name: str, schedule: str, timezone: str, args: list[str]) -> KubeObject:
    container = {
        "name": "repartition",
        "image": config.tessera_image(),
        "imagePullPolicy": config.images.pull_policy,
        "command": ["tessera", "repartition", *args, "--plan", PLAN_FILE, "--pool", plan.pool],
        "resources": resources("50m", "64Mi", "500m", "256Mi"),
        "securityContext": restricted_security_context(),
        "volumeMounts": [{"name": "plan", "mountPath": PLAN_DIR, "readOnly": True}],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,  # it patches node labels
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "plan", "configMap": {"name": NAME}}],
    }
    if config.images.pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in config.images.pull_secrets]
    labels = dict(sorted({**component_labels(COMPONENT, NAME), LABEL_POOL: plan.pool}.items()))
    return obj(
        "batch/v1",
        "CronJob",
        metadata(name, COMPONENT, config.namespace, extra_labels={LABEL_POOL: plan.pool}),
        spec={
            "schedule": schedule,
            "timeZone": timezone,
            "concurrencyPolicy": "Forbid",
            # a controller outage shorter than this still runs the missed switch late, not never
            "startingDeadlineSeconds": 3600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 2,
                    "activeDeadlineSeconds": _job_timeout_s(plan, config),
                    "ttlSecondsAfterFinished": 86400,
                    "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                }
            },
        },
    )


def _admission_policy(config: StackConfig, plans: list[PoolPlan]) -> list[KubeObject]:
    user = f"system:serviceaccount:{config.namespace}:{NAME}"
    managed = "[" + ", ".join(f"'{k}'" for k in MANAGED_LABELS) + "]"
    pools = "[" + ", ".join(f"'{p.pool}'" for p in plans) + "]"
    old_labels = "(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})"
    new_labels = "(has(object.metadata.labels) ? object.metadata.labels : {})"
    policy = obj(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        metadata(NAME, COMPONENT, namespace=None),
        spec={
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}]
            },
            "matchConditions": [{"name": "repartition-job-only", "expression": f"request.userInfo.username == '{user}'"}],
            "validations": [
                {
                    "expression": f"'{LABEL_POOL}' in {old_labels} && {old_labels}['{LABEL_POOL}'] in {pools}",
                    "message": "the re-partitioning job may only relabel nodes of pools with a schedule",
                },
                {
                    "expression": (
                        f"{new_labels}.all(k, k in {managed} || (k in {old_labels} && {old_labels}[k] == {new_labels}[k])) && "
                        f"{old_labels}.all(k, k in {managed} || k in {new_labels})"
                    ),
                    "message": "the re-partitioning job may only change layout labels",
                },
                {"expression": "object.spec == oldObject.spec", "message": "the re-partitioning job may not change a node's spec"},
            ],
        },
    )
    binding = obj(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        metadata(NAME, COMPONENT, namespace=None),
        spec={"policyName": NAME, "validationActions": ["Deny"]},
    )
    return [policy, binding]


def build_repartition_objects(config: StackConfig) -> list[KubeObject]:
    """[] when no pool has a schedule."""
    plans = repartition_plans(config)
    if not plans:
        return []
    rules = [
        policy_rule([""], ["nodes"], ["get", "list", "patch"]),
        # MIG pools: wait until no pod on the node holds a GPU before asking mig-manager to repartition
        policy_rule([""], ["pods"], ["list"]),
    ]
    objects = [
        service_account(NAME, COMPONENT, config.namespace),
        *cluster_grant(NAME, COMPONENT, rules, NAME, config.namespace),
        config_map(NAME, COMPONENT, {PLAN_KEY: plan_document(plans)}, config.namespace),
        # Kubernetes < 1.30 has no GA ValidatingAdmissionPolicy: there the ClusterRole is the only limit.
        *(_admission_policy(config, plans) if has_validating_admission_policy(config) else []),
    ]
    for plan in plans:
        for layout in plan.layouts:
            objects.append(
                _cronjob(config, plan, cronjob_name(plan.pool, str(layout.index)), layout.cron, layout.timezone, ["apply", "--layout-index", str(layout.index)])
            )
        first = plan.layouts[0]
        objects.append(_cronjob(config, plan, cronjob_name(plan.pool, "reconcile"), RECONCILE_SCHEDULE, first.timezone, ["reconcile", "--new-nodes-only"]))
    return objects
