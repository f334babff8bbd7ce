"""The mutating admission webhook: Deployment, Service, settings, TLS Secret, RBAC, and the
MutatingWebhookConfiguration that routes pods to it.

Fail closed, but only where it must: `failurePolicy: Fail` (configurable) applies only to pods
that reach the webhook, and `matchConditions` (CEL, GA in Kubernetes 1.30) let through to it only
pods whose containers ask for `tessera.dev/*` (or qGPU names, when some pool accepts them). Every
other pod is admitted without calling the webhook, so a webhook outage never blocks ordinary work;
`kube-system`, Tessera's own namespace and the GPU operator's namespace are excluded entirely so
the webhook can never block its own recovery.

Two entries: one for ordinary namespaces (path /mutate) and one for namespaces labelled
`tessera.dev/qgpu-aliases=true` (path /mutate/qgpu): the path tells the webhook about the
namespace opt-in, so it needs no permission to read Namespaces.

The certificate is made in the cluster (`tessera.webhook.tls`): the Secret is rendered empty so the
webhook's Role can pin `get`/`update`/`patch` to its name; the webhook fills it and sets the
`caBundle` below. Pulumi declares those two objects as typed resources that ignore changes to
`caBundle` and the Secret's `data` (components/tessera_pulumi/platform/webhook.py), so neither is ever rendered here.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from tessera.model.pools import SharedPool
from tessera.model.stack import StackConfig
from tessera.model.contract import GPU_CORE, GPU_MEMORY, LABEL_NAMESPACE_QGPU_ALIASES, PRIORITY_CLASS_CRITICAL, QGPU_CORE, QGPU_MEMORY
from tessera.manifests.kube_version import has_match_conditions
from tessera.manifests.objects import (
    KubeObject,
    component_labels,
    config_map,
    metadata,
    obj,
    pod_disruption_budget,
    policy_rule,
    resources,
    restricted_security_context,
    selector_labels,
    service_account,
)
from tessera.manifests.rbac import cluster_grant, namespaced_grant
from tessera.webhook.settings import DEFAULT_PORT, WEBHOOK_PATH, WEBHOOK_QGPU_NAMESPACE_PATH, TlsSettings, WebhookSettings

COMPONENT: Final = "webhook"
NAME: Final = "tessera-webhook"
TLS_SECRET: Final = "tessera-webhook-tls"
SETTINGS_KEY: Final = "webhook.json"
SETTINGS_DIR: Final = "/etc/tessera/webhook"
HOOK_NAME: Final = "pods.webhook.tessera.dev"
QGPU_HOOK_NAME: Final = "qgpu-pods.webhook.tessera.dev"
ANNOTATION_SETTINGS_HASH: Final = "tessera.dev/webhook-settings-sha256"
SYSTEM_NAMESPACES: Final = ("kube-node-lease", "kube-public", "kube-system")


def _gpu_quotas(config: StackConfig) -> dict[str, dict[str, int]]:
    """Namespace -> hard limit of the Tessera resources the webhook admits (the stack's `quotas`)."""
    out: dict[str, dict[str, int]] = {}
    for quota in config.quotas:
        hard = {name: value for name, value in ((GPU_CORE, quota.gpu_core), (GPU_MEMORY, quota.gpu_memory_mib)) if value is not None}
        if hard:
            out[quota.namespace] = hard
    return out


def webhook_settings(config: StackConfig) -> WebhookSettings:
    shared = [p for p in config.node_pools if isinstance(p, SharedPool)]
    return WebhookSettings(
        shared_pools=frozenset(p.name for p in shared),
        qgpu_alias_pools=frozenset(p.name for p in shared if p.sharing.qgpu_aliases),
        dra_pools=frozenset(p.name for p in shared if p.allocation == "dra"),
        tls=TlsSettings(namespace=config.namespace, service_name=NAME, secret_name=TLS_SECRET, webhook_configuration_name=NAME),
        quotas=_gpu_quotas(config),
    )


def settings_document(settings: WebhookSettings) -> str:
    return json.dumps(settings.to_json(), indent=2, sort_keys=True) + "\n"


def _resource_predicate(with_qgpu: bool) -> str:
    names = f" || k in ['{QGPU_CORE}', '{QGPU_MEMORY}']" if with_qgpu else ""
    return f"k.startsWith('tessera.dev/'){names}"


def match_expression(with_qgpu: bool) -> str:
    """CEL: true when any (init) container asks for a Tessera resource (or a qGPU name)."""
    p = _resource_predicate(with_qgpu)
    asks = (
        f"has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, {p})) || "
        f"(has(c.resources.requests) && c.resources.requests.exists(k, {p})))"
    )
    return f"object.spec.containers.exists(c, {asks}) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, {asks}))"


def _namespace_selector(config: StackConfig, qgpu_namespace: bool) -> dict[str, Any]:
    excluded = sorted({*SYSTEM_NAMESPACES, config.namespace, config.gpu_operator.namespace})
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded},
            {"key": LABEL_NAMESPACE_QGPU_ALIASES, "operator": "In" if qgpu_namespace else "NotIn", "values": ["true"]},
        ]
    }


def _hook(config: StackConfig, name: str, path: str, qgpu_namespace: bool, with_qgpu: bool) -> dict[str, Any]:
    scoped = has_match_conditions(config)
    hook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"namespace": config.namespace, "name": NAME, "path": path, "port": 443}},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}],
        # Without matchConditions (Kubernetes < 1.28) the webhook would see every pod; failing
        # closed there would let a webhook outage block all pod creation, so it fails open.
        "failurePolicy": config.webhook.failure_policy if scoped else "Ignore",
        "matchPolicy": "Equivalent",
        "namespaceSelector": _namespace_selector(config, qgpu_namespace),
        "objectSelector": {},
        "sideEffects": "None",
        "timeoutSeconds": config.webhook.timeout_seconds,
        # our patch is idempotent, but nothing we set depends on what later webhooks add
        "reinvocationPolicy": "Never",
    }
    if scoped:
        hook["matchConditions"] = [{"name": "asks-for-tessera-resources", "expression": match_expression(with_qgpu)}]
    return hook


def mutating_webhook_configuration(config: StackConfig, settings: WebhookSettings) -> KubeObject:
    # In ordinary namespaces qGPU names reach the webhook only when some pool accepts them.
    hooks = [
        _hook(config, HOOK_NAME, WEBHOOK_PATH, qgpu_namespace=False, with_qgpu=bool(settings.qgpu_alias_pools)),
        _hook(config, QGPU_HOOK_NAME, WEBHOOK_QGPU_NAMESPACE_PATH, qgpu_namespace=True, with_qgpu=True),
    ]
    return obj("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", metadata(NAME, COMPONENT, namespace=None), webhooks=hooks)


def _deployment(config: StackConfig, settings_text: str) -> KubeObject:
    probe = {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"}, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3}
    container = {
        "name": "webhook",
        "image": config.tessera_image(),
        "imagePullPolicy": config.images.pull_policy,
        "command": ["tessera", "webhook", "serve", "--config", f"{SETTINGS_DIR}/{SETTINGS_KEY}", "--port", str(DEFAULT_PORT)],
        "env": [{"name": "TMPDIR", "value": "/tmp"}],  # certificate files for the TLS context
        "ports": [{"name": "https", "containerPort": DEFAULT_PORT, "protocol": "TCP"}],
        "livenessProbe": {**probe, "initialDelaySeconds": 5},
        "readinessProbe": {**probe, "periodSeconds": 5},
        "resources": resources("50m", "64Mi", "500m", "256Mi"),
        "securityContext": restricted_security_context(),
        "volumeMounts": [
            {"name": "settings", "mountPath": SETTINGS_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,  # it reads/writes its Secret and caBundle
        "priorityClassName": PRIORITY_CLASS_CRITICAL,  # ours: some clusters admit system-* only in kube-system
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": 10,
        "containers": [container],
        "volumes": [
            {"name": "settings", "configMap": {"name": NAME}},
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        ],
        # replicas on different nodes, so one node drain never takes admission of GPU pods down
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": selector_labels(COMPONENT, NAME)},
            }
        ],
    }
    if config.images.pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in config.images.pull_secrets]
    digest = hashlib.sha256(settings_text.encode()).hexdigest()
    template_meta = {"labels": dict(sorted(component_labels(COMPONENT, NAME).items())), "annotations": {ANNOTATION_SETTINGS_HASH: digest}}
    return obj(
        "apps/v1",
        "Deployment",
        metadata(NAME, COMPONENT, config.namespace),
        spec={
            "replicas": config.webhook.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(COMPONENT, NAME)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    )


def _service(config: StackConfig) -> KubeObject:
    return obj(
        "v1",
        "Service",
        metadata(NAME, COMPONENT, config.namespace),
        spec={
            "type": "ClusterIP",
            "selector": selector_labels(COMPONENT, NAME),
            "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}],
        },
    )


def _tls_secret(config: StackConfig) -> KubeObject:
    meta = metadata(TLS_SECRET, COMPONENT, config.namespace, annotations={"tessera.dev/filled-by": NAME})
    return obj("v1", "Secret", meta, type="Opaque")


def build_webhook_objects(config: StackConfig) -> list[KubeObject]:
    """[] when the stack has no shared pool (nothing to route to the Tessera scheduler)."""
    settings = webhook_settings(config)
    if not settings.shared_pools:
        return []
    text = settings_document(settings)
    secret_rules = [policy_rule([""], ["secrets"], ["get", "patch", "update"], resource_names=[TLS_SECRET])]
    webhook_rules = [
        policy_rule(["admissionregistration.k8s.io"], ["mutatingwebhookconfigurations"], ["get", "patch"], resource_names=[NAME])
    ]
    return [
        service_account(NAME, COMPONENT, config.namespace),
        *namespaced_grant(NAME, COMPONENT, secret_rules, NAME, config.namespace),
        *cluster_grant(NAME, COMPONENT, webhook_rules, NAME, config.namespace),
        config_map(NAME, COMPONENT, {SETTINGS_KEY: text}, config.namespace),
        _tls_secret(config),
        _service(config),
        _deployment(config, text),
        pod_disruption_budget(NAME, COMPONENT, config.namespace, config.webhook.replicas),
        mutating_webhook_configuration(config, settings),
    ]
