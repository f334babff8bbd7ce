"""RBAC builders: one ServiceAccount per component, named roles, explicit verbs, never wildcards.

Every rule a component gets is written out here or in its builder, so a reviewer reads the whole
grant in the rendered YAML. The only roles referenced but not rendered are Kubernetes' own
bootstrap roles listed in `BUILTIN_ROLES` (see docs/deployment.md for why each is bound).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from tessera.model.contract import TESSERA_NAMESPACE
from tessera.manifests.objects import KubeObject, metadata, obj

RBAC_API: Final = "rbac.authorization.k8s.io/v1"

# Bootstrap roles maintained by the API server for the release it runs; binding them keeps the
# second scheduler's grant in step with what that release's kube-scheduler reads (for example the
# resource.k8s.io objects of dynamic resource allocation), without copying a version's list here.
BUILTIN_ROLES: Final = frozenset(
    {
        ("ClusterRole", "system:kube-scheduler"),
        ("ClusterRole", "system:volume-scheduler"),
        ("Role", "extension-apiserver-authentication-reader"),
    }
)
# Roles no Tessera object may ever reference.
FORBIDDEN_ROLES: Final = frozenset({"cluster-admin", "admin", "edit", "system:masters"})


def _subject(service_account: str, namespace: str) -> dict[str, Any]:
    return {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}


def cluster_role(name: str, component: str, rules: Sequence[dict[str, Any]]) -> KubeObject:
    return obj(RBAC_API, "ClusterRole", metadata(name, component, namespace=None), rules=list(rules))


def cluster_role_binding(
    name: str, component: str, role: str, service_account: str, sa_namespace: str = TESSERA_NAMESPACE
) -> KubeObject:
    return obj(
        RBAC_API,
        "ClusterRoleBinding",
        metadata(name, component, namespace=None),
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        subjects=[_subject(service_account, sa_namespace)],
    )


def role(name: str, component: str, rules: Sequence[dict[str, Any]], namespace: str = TESSERA_NAMESPACE) -> KubeObject:
    return obj(RBAC_API, "Role", metadata(name, component, namespace), rules=list(rules))


def role_binding(
    name: str,
    component: str,
    role_name: str,
    service_account: str,
    namespace: str = TESSERA_NAMESPACE,
    role_kind: str = "Role",
    sa_namespace: str = TESSERA_NAMESPACE,
) -> KubeObject:
    return obj(
        RBAC_API,
        "RoleBinding",
        metadata(name, component, namespace),
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        subjects=[_subject(service_account, sa_namespace)],
    )


def cluster_grant(
    name: str, component: str, rules: Sequence[dict[str, Any]], service_account: str, sa_namespace: str
) -> list[KubeObject]:
    """A ClusterRole and its binding to one ServiceAccount, both named `name`."""
    return [cluster_role(name, component, rules), cluster_role_binding(name, component, name, service_account, sa_namespace)]


def namespaced_grant(
    name: str, component: str, rules: Sequence[dict[str, Any]], service_account: str, namespace: str = TESSERA_NAMESPACE
) -> list[KubeObject]:
    """A Role and its RoleBinding in one namespace, both named `name`."""
    return [role(name, component, rules, namespace), role_binding(name, component, name, service_account, namespace)]
