"""Least privilege that still works: every Kubernetes API call a component made while running the
scenarios is granted by the RBAC rendered for its ServiceAccount.

The calls are recorded at the `KubeApi` seam (the only way Tessera talks to the API server) and
mapped to the (API group, resource, verb) the real client uses for them (`tessera/kube/client.py`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from e2e_cluster import E2ECluster, RecordingApi, job_pod, wait_until
from e2e_stack import Rendered, shared_pool, stack

from tessera.alloc import PlacementPolicy
from tessera.kube.api import KubeApi
from tessera.kube.fake import FakeKubeApi
from tessera.model import load_stack_file
from tessera.model.contract import DRA_DRIVER, EXTENDER_LEASE, GPU_CORE, GPU_MEMORY, TESSERA_NAMESPACE, NodeGpu
from tessera.model.pool_policy import PoolPolicy
from tessera.repartition import apply_layout, load_plan
from tessera.scheduler.dra_scores import DraScorer, DraScoreSettings
from tessera.scheduler.extender_types import ExtenderArgs
from tessera_node.dra.slices import slice_body, slice_spec
from tessera_node.registry import ContainerRegistry

# KubeApi method -> (API group, resource, verb) of the request the real client sends
REQUESTS: dict[str, tuple[str, str, str]] = {
    "get_pod": ("", "pods", "get"),
    "list_pods": ("", "pods", "list"),
    "list_pods_and_version": ("", "pods", "list"),
    "watch_pods": ("", "pods", "watch"),
    "patch_pod_annotations": ("", "pods", "patch"),
    "bind_pod": ("", "pods/binding", "create"),
    "evict_pod": ("", "pods/eviction", "create"),
    "get_node": ("", "nodes", "get"),
    "list_nodes": ("", "nodes", "list"),
    "list_nodes_and_version": ("", "nodes", "list"),
    "watch_nodes": ("", "nodes", "watch"),
    "patch_node_annotations": ("", "nodes", "patch"),
    "patch_node_labels": ("", "nodes", "patch"),
    "patch_node_status_capacity": ("", "nodes/status", "patch"),
    "create_configmap": ("", "configmaps", "create"),
    "get_configmap": ("", "configmaps", "get"),
    "replace_configmap": ("", "configmaps", "update"),
    "create_event": ("", "events", "create"),
    # leader election of the extender: only ever the Lease EXTENDER_LEASE in Tessera's namespace
    "get_lease": ("coordination.k8s.io", "leases", "get"),
    "replace_lease": ("coordination.k8s.io", "leases", "update"),
    "create_lease": ("coordination.k8s.io", "leases", "create"),
    # the DRA kubelet plugin (tessera node dra-plugin)
    "get_resource_claim": ("resource.k8s.io", "resourceclaims", "get"),
    "list_resource_claims": ("resource.k8s.io", "resourceclaims", "list"),
    "list_resource_slices": ("resource.k8s.io", "resourceslices", "list"),
    # the extender's view of dra pools (only with a dra pool)
    "list_resource_claims_and_version": ("resource.k8s.io", "resourceclaims", "list"),
    "list_resource_slices_and_version": ("resource.k8s.io", "resourceslices", "list"),
    "watch_resource_claims": ("resource.k8s.io", "resourceclaims", "watch"),
    "watch_resource_slices": ("resource.k8s.io", "resourceslices", "watch"),
    "create_resource_slice": ("resource.k8s.io", "resourceslices", "create"),
    "replace_resource_slice": ("resource.k8s.io", "resourceslices", "update"),
    "delete_resource_slice": ("resource.k8s.io", "resourceslices", "delete"),
}


def _grants(rendered: Rendered, service_account: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) the ClusterRoles bound to the ServiceAccount allow (cluster-wide:
    Tessera reads and writes pods and ConfigMaps in every namespace), and the Roles bound in
    Tessera's namespace (the extender's Lease lives there)."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in rendered.objects() if o["kind"] in ("ClusterRole", "Role")}
    out: set[tuple[str, str, str]] = set()
    for binding in (o for o in rendered.objects() if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] != TESSERA_NAMESPACE:
            continue
        subjects = binding.get("subjects") or []
        if not any(s["name"] == service_account and s.get("namespace") == TESSERA_NAMESPACE for s in subjects):
            continue
        role = roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        for rule in (role or {}).get("rules") or []:
            if rule.get("resourceNames") and EXTENDER_LEASE not in rule["resourceNames"]:
                continue  # a grant limited to named objects covers only them; the one named object the seam writes is the Lease
            out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def _service_account(rendered: Rendered, kind: str, name: str) -> str:
    workload = rendered.find(kind, name)
    spec = workload["spec"]["jobTemplate"]["spec"]["template"]["spec"] if kind == "CronJob" else workload["spec"]["template"]["spec"]
    return str(spec["serviceAccountName"])


def _missing(calls: set[str], grants: set[tuple[str, str, str]]) -> list[str]:
    unknown = sorted(c for c in calls if c not in REQUESTS)
    assert not unknown, f"map these KubeApi methods to requests: {unknown}"
    return sorted(f"{c} needs {REQUESTS[c]}" for c in calls if REQUESTS[c] not in grants)


@pytest.fixture(scope="module")
def exercised() -> Any:
    """Run a little of every scenario against a stack with every shared-pool feature on."""
    pool = {**shared_pool(policy="fixed-share", online_offline=True, instance_type="GN7.10XLARGE160", memoryEnforcement="enforce"),
            "repartition": [{"cron": "0 8 * * *", "layout": 4}, {"cron": "0 20 * * *", "layout": 1}]}
    cluster = E2ECluster(stack(pool))
    try:
        offline, _ = cluster.submit_and_run(job_pod("rbac-offline", {GPU_CORE: 50, GPU_MEMORY: 1024}, app_class="offline"))
        online, _ = cluster.submit_and_run(job_pod("rbac-online", {GPU_CORE: 40, GPU_MEMORY: 1024}, app_class="online"))
        node = cluster.nodes["t4-shared-0"]
        assert wait_until(lambda: len(ContainerRegistry(node.settings.state_dir).all()) == 2)
        cluster.start_process(offline, "main", sm_pct=90, memory_mib=2048)  # over its gpu-memory: an event
        cluster.start_process(online, "main", sm_pct=90)
        cluster.start_agent("t4-shared-0")
        node.tick(1.0)
        node.backend.inject_xid(1, 48)
        node.backend.set_responsive(1, False)  # stays unhealthy until the plugin has published it
        assert wait_until(lambda: '"healthy":false' in cluster.api.get_node("t4-shared-0")["metadata"]["annotations"]["tessera.dev/gpus"])
        on_bad = {p["metadata"]["name"] for p in (offline, online) if p["metadata"]["annotations"]["tessera.dev/gpu-index-container-main"] == "1"}
        assert on_bad and wait_until(lambda: not on_bad & {p["metadata"]["name"] for p in cluster.api.list_pods()}), "pods of the bad GPU are evicted"
        if "rbac-online" not in on_bad:
            cluster.delete("default", "rbac-online")
        repartition_calls: set[str] = set()
        plan = load_plan(cluster.rendered.configmap_file("tessera-repartition", "plan.json"), "t4-shared")
        apply_layout(cast(KubeApi, RecordingApi(cluster.api, repartition_calls)), plan, 1, clock=lambda: 0.0, sleep=lambda _s: None)
        assert {e["reason"] for e in cluster.api.list_events()}, "the agent posted events"
        yield cluster.rendered, {"extender": cluster.extender_calls, "node": node.calls, "repartition": repartition_calls}
    finally:
        cluster.close()


@pytest.mark.parametrize(
    ("component", "kind", "name"),
    [("extender", "Deployment", "tessera-extender"), ("node", "DaemonSet", "tessera-node"), ("repartition", "CronJob", "tessera-rp-t4-shared-0")],
)
def test_rendered_rbac_grants_every_call_the_component_made(exercised: Any, component: str, kind: str, name: str) -> None:
    rendered, calls = exercised
    assert calls[component], f"{component} made no API calls: the scenario did not exercise it"
    grants = _grants(rendered, _service_account(rendered, kind, name))
    assert _missing(calls[component], grants) == [], sorted(calls[component])


def test_the_extenders_rbac_on_a_dra_stack_grants_what_dra_prioritize_does() -> None:
    """With a dra pool the extender also lists and watches slices and claims (`/dra/prioritize`);
    its rendered ClusterRole must grant that, read-only."""
    rendered = Rendered(load_stack_file(Path(__file__).resolve().parents[2] / "examples" / "dra" / "Pulumi.dra.yaml"))
    api = FakeKubeApi()
    api.create_resource_slice(slice_body("n1", slice_spec("n1", [NodeGpu(0, "GPU-0", "L40S", 46068)], PoolPolicy(), {}, 1)))
    exactly = {"deviceClassName": f"pool.{DRA_DRIVER}", "capacity": {"requests": {"cores": "30", "memory": "4Gi"}}}
    api.put_resource_claim({"metadata": {"name": "c", "namespace": "ml"}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
    calls: set[str] = set()
    scorer = DraScorer(cast(KubeApi, RecordingApi(api, calls)), PlacementPolicy.FRAGMENTATION_AWARE, DraScoreSettings(watch_timeout_s=0.2, sync_wait_s=5))
    try:
        pod = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}}
        assert dict(scorer.prioritize(ExtenderArgs(pod, node_names=["n1"]))) == {"n1": 10}
        assert wait_until(lambda: {"watch_resource_slices", "watch_resource_claims"} <= calls)
    finally:
        scorer.stop()
    grants = _grants(rendered, _service_account(rendered, "Deployment", "tessera-extender"))
    assert _missing(calls, grants) == [], sorted(calls)
    assert not {v for g, r, v in grants if g == "resource.k8s.io"} - {"get", "list", "watch"}, "read-only"
