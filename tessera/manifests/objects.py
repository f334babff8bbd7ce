"""Small typed helpers shared by every manifest builder: metadata, labels, containers, ordering.

Builders return plain ``dict`` objects (the Kubernetes wire form) so that the same objects feed
Pulumi's ``ConfigGroup`` and ``tessera render`` without conversion. Keys are camelCase as the API
expects; nothing here depends on Pulumi.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from tessera.model.contract import TESSERA_NAMESPACE

KubeObject = dict[str, Any]

PART_OF: Final = "tessera"
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "tessera"

# Apply order: things others refer to first (namespaces, CRD-free cluster objects, identities),
# then configuration, then workloads. `kubectl apply -f` on a rendered file follows file order.
_KIND_ORDER: Final = (
    "Namespace",
    "PriorityClass",
    "ResourceQuota",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "Deployment",
    "DaemonSet",
    "CronJob",
    "Job",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ServiceMonitor",
    "PodMonitor",
)


def tmp_volume() -> dict[str, Any]:
    """A small writable /tmp for containers with a read-only root filesystem (tempfile, grpc)."""
    return {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}


def tmp_mount() -> dict[str, Any]:
    return {"name": "tmp", "mountPath": "/tmp"}


def component_labels(component: str, name: str | None = None) -> dict[str, str]:
    """The recommended app.kubernetes.io labels for one Tessera component."""
    return {
        LABEL_NAME: name or f"tessera-{component}",
        LABEL_COMPONENT: component,
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
    }


def selector_labels(component: str, name: str | None = None) -> dict[str, str]:
    """The immutable subset used in selectors (a Deployment's selector can never change)."""
    return {LABEL_NAME: name or f"tessera-{component}", LABEL_COMPONENT: component}


def metadata(
    name: str,
    component: str,
    namespace: str | None = TESSERA_NAMESPACE,
    annotations: Mapping[str, str] | None = None,
    extra_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """ObjectMeta; pass ``namespace=None`` for cluster-scoped objects."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    labels = component_labels(component)
    labels.update(extra_labels or {})
    meta["labels"] = dict(sorted(labels.items()))
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    return meta


def obj(api_version: str, kind: str, meta: dict[str, Any], **fields: Any) -> KubeObject:
    """One API object with apiVersion and kind first (readable YAML)."""
    out: KubeObject = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    out.update(fields)
    return out


def service_account(name: str, component: str, namespace: str = TESSERA_NAMESPACE) -> KubeObject:
    """A ServiceAccount whose token is mounted only where a pod spec asks for it."""
    return obj("v1", "ServiceAccount", metadata(name, component, namespace), automountServiceAccountToken=False)


def config_map(name: str, component: str, data: Mapping[str, str], namespace: str = TESSERA_NAMESPACE) -> KubeObject:
    return obj("v1", "ConfigMap", metadata(name, component, namespace), data=dict(sorted(data.items())))


def resources(cpu_request: str, memory_request: str, cpu_limit: str, memory_limit: str) -> dict[str, Any]:
    """Container resources; limits are always set so a runaway component cannot starve a node."""
    return {
        "requests": {"cpu": cpu_request, "memory": memory_request},
        "limits": {"cpu": cpu_limit, "memory": memory_limit},
    }


def restricted_security_context(run_as_user: int = 65532) -> dict[str, Any]:
    """The Pod Security Standards "restricted" container context (non-root, no privilege, RO root)."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": run_as_user,
        "runAsGroup": run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def http_probe(path: str, port: int | str, period_seconds: int = 10, failure_threshold: int = 3) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port, "scheme": "HTTP"},
        "periodSeconds": period_seconds,
        "timeoutSeconds": 2,
        "failureThreshold": failure_threshold,
    }


def env(values: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in sorted(values.items())]


def field_env(name: str, field_path: str) -> dict[str, Any]:
    """An env var from the downward API (e.g. the node name for node-local components)."""
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field_path}}}


def policy_rule(api_groups: Sequence[str], resources_: Sequence[str], verbs: Sequence[str], resource_names: Sequence[str] = ()) -> dict[str, Any]:
    """One RBAC rule; lists are sorted so renders are stable and reviews read easily."""
    rule: dict[str, Any] = {"apiGroups": list(api_groups), "resources": sorted(resources_), "verbs": sorted(verbs)}
    if resource_names:
        rule["resourceNames"] = sorted(resource_names)
    return rule


def _kind_rank(kind: str) -> int:
    return _KIND_ORDER.index(kind) if kind in _KIND_ORDER else len(_KIND_ORDER)


def sort_key(o: KubeObject) -> tuple[int, str, str, str]:
    meta = o.get("metadata", {})
    return (_kind_rank(str(o["kind"])), str(o["kind"]), str(meta.get("namespace", "")), str(meta["name"]))


def sorted_objects(objects: Iterable[KubeObject]) -> list[KubeObject]:
    """Objects in apply order, then by namespace and name: one deterministic order for every render."""
    return sorted(objects, key=sort_key)


def object_id(o: KubeObject) -> str:
    """`Kind/namespace/name` (cluster-scoped objects have an empty namespace): a stable identity."""
    meta = o.get("metadata", {})
    return f"{o['kind']}/{meta.get('namespace', '')}/{meta['name']}"


def pod_disruption_budget(name: str, component: str, namespace: str, replicas: int) -> KubeObject:
    """Keep one replica through voluntary disruptions when there is a standby; never block drains
    of a single replica (a one-pod budget of minAvailable 1 would hold a node drain forever)."""
    spec: dict[str, Any] = {"selector": {"matchLabels": selector_labels(component)}}
    if replicas >= 2:
        spec["minAvailable"] = 1
    else:
        spec["maxUnavailable"] = 1
    spec["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    return obj("policy/v1", "PodDisruptionBudget", metadata(name, component, namespace), spec=spec)
