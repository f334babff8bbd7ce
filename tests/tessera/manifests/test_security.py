"""Least privilege in the rendered stacks: RBAC, privileged containers, host paths, identities."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import pytest
from manifests_helpers import BuiltStack

from tessera.manifests import extender, node
from tessera.manifests.rbac import BUILTIN_ROLES, FORBIDDEN_ROLES

WORKLOAD_KINDS: Final = ("Deployment", "DaemonSet", "StatefulSet", "Job")
# The only privileged container in all of Tessera, and why: cgroup freezer, MPS daemon, stopping processes.
PRIVILEGED_ALLOWED: Final = {(node.NAME, "agent"), (node.NAME, "lease-guard")}
NODE_HOST_PATHS: Final = {
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet/pod-resources",
    "/run/tessera",
    "/var/lib/tessera",
    "/sys/fs/cgroup",
}


def _roles(stack: BuiltStack) -> Iterator[dict[str, Any]]:
    for _, o in stack.objects():
        if o["kind"] in ("Role", "ClusterRole"):
            yield o


def _pod_specs(stack: BuiltStack) -> Iterator[tuple[str, dict[str, Any]]]:
    for _, o in stack.objects():
        if o["kind"] in WORKLOAD_KINDS:
            yield o["metadata"]["name"], o["spec"]["template"]["spec"]
        elif o["kind"] == "CronJob":
            yield o["metadata"]["name"], o["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_no_rbac_rule_uses_a_wildcard(stack: BuiltStack) -> None:
    for role in _roles(stack):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(key, []), f"{role['kind']}/{role['metadata']['name']}: {key} has *"
                assert not any("*" in v for v in rule.get(key, []) if v != ""), role["metadata"]["name"]


def test_no_binding_grants_admin_and_every_role_reference_resolves(stack: BuiltStack) -> None:
    rendered = {(o["kind"], o["metadata"]["name"]) for o in _roles(stack)}
    for _, o in stack.objects():
        if o["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = (o["roleRef"]["kind"], o["roleRef"]["name"])
        assert ref[1] not in FORBIDDEN_ROLES, o["metadata"]["name"]
        assert ref in rendered or ref in BUILTIN_ROLES, f"{o['metadata']['name']} refers to unknown {ref}"
        for subject in o["subjects"]:
            assert subject["kind"] == "ServiceAccount", "only Tessera's own ServiceAccounts are bound"


def test_no_role_can_escalate(stack: BuiltStack) -> None:
    """Verbs and resources that would let a component grant itself more: none may appear."""
    for role in _roles(stack):
        for rule in role["rules"]:
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), role["metadata"]["name"]
            assert not {"secrets", "roles", "clusterroles", "rolebindings", "clusterrolebindings"} & set(rule["resources"]) or (
                rule.get("resourceNames")
            ), f"{role['metadata']['name']} may touch {rule['resources']} without resourceNames"


def test_every_pod_runs_as_its_own_rendered_service_account(stack: BuiltStack) -> None:
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for _, o in stack.objects() if o["kind"] == "ServiceAccount"}
    namespaces = {o["metadata"]["name"]: o for _, o in stack.objects() if o["kind"] in WORKLOAD_KINDS + ("CronJob",)}
    for name, spec in _pod_specs(stack):
        ns = namespaces[name]["metadata"]["namespace"]
        assert (ns, spec.get("serviceAccountName")) in accounts, name
    # tokens are mounted only where a pod spec asks for them
    for _, o in stack.objects():
        if o["kind"] == "ServiceAccount":
            assert o.get("automountServiceAccountToken") is False, o["metadata"]["name"]


def test_only_the_node_agent_and_its_lease_guard_are_privileged(stack: BuiltStack) -> None:
    privileged = {
        (name, c["name"])
        for name, spec in _pod_specs(stack)
        for c in spec.get("initContainers", []) + spec["containers"]
        if c.get("securityContext", {}).get("privileged")
    }
    expected = PRIVILEGED_ALLOWED if stack.config.pools_of_kind("shared") else set()
    assert privileged == expected


def test_control_plane_containers_are_restricted(stack: BuiltStack) -> None:
    for name in (extender.NAME, "tessera-scheduler"):
        if not stack.config.pools_of_kind("shared"):
            pytest.skip("no shared pool")
        spec = stack.find("Deployment", name)["spec"]["template"]["spec"]
        assert spec.get("hostPID") is not True and spec.get("hostNetwork") is not True
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"] == {"drop": ["ALL"]}
            assert "limits" in c["resources"], name


def test_node_daemonset_mounts_only_the_host_paths_it_needs(stack: BuiltStack) -> None:
    if not stack.config.pools_of_kind("shared"):
        pytest.skip("no shared pool")
    spec = stack.find("DaemonSet", node.NAME)["spec"]["template"]["spec"]
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == NODE_HOST_PATHS
    plugin = next(c for c in spec["containers"] if c["name"] == "device-plugin")
    assert plugin["securityContext"]["privileged"] is False
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in plugin["volumeMounts"]}
    assert "/sys/fs/cgroup" not in mounts  # the freezer is the agent's job
    assert mounts["/var/lib/kubelet/pod-resources"] is True


def test_extender_replicas_elect_a_leader_and_never_block_a_drain(stack: BuiltStack) -> None:
    """More replicas are safe because only the Lease holder binds (tests/tessera/manifests/test_extender_ha.py)."""
    if not stack.config.pools_of_kind("shared"):
        pytest.skip("no shared pool")
    deployment = stack.find("Deployment", extender.NAME)
    assert deployment["spec"]["replicas"] == stack.config.scheduler.extender.replicas
    assert "--leader-elect=true" in deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    pdb = stack.find("PodDisruptionBudget", extender.NAME)
    assert pdb["spec"].get("maxUnavailable") == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_scheduler_budget_keeps_a_leader_when_there_is_a_standby(stack: BuiltStack) -> None:
    if not stack.config.pools_of_kind("shared"):
        pytest.skip("no shared pool")
    replicas = stack.config.scheduler.replicas
    pdb = stack.find("PodDisruptionBudget", "tessera-scheduler")["spec"]
    assert pdb == {**pdb, **({"minAvailable": 1} if replicas >= 2 else {"maxUnavailable": 1})}


def test_node_component_may_evict_pods_but_never_delete_them(stack: BuiltStack) -> None:
    """Pods on an unhealthy GPU are evicted (PodDisruptionBudgets hold), not deleted."""
    role = next((r for r in _roles(stack) if r["metadata"]["name"] == node.NAME), None)
    if role is None:
        pytest.skip("this stack has no shared pool")
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("", "pods/eviction", "create") in grants
    assert not {(g, r, v) for g, r, v in grants if r == "pods" and v in ("delete", "deletecollection")}
