"""Existing clusters: pool labels and taints reach the nodes through server-side-apply NodePatches.

The program runs under Pulumi mocks with the cluster's nodes as preview lists them; every NodePatch
it declares is then applied to `SsaNodeStore`, a stand-in that keeps field ownership the way
kube-apiserver does (tests/support/ssa_node_store.py), so each test checks the nodes a user would
see after `pulumi up`, and the next preview reads the ownership back from managedFields.
"""
from __future__ import annotations

from typing import Any

import pulumi_kubernetes as k8s
import pytest
from pulumi_program_mocks import K8S_PROVIDER, Declared, declare
from ssa_node_store import SsaNodeStore, patch_config

from tessera.model import StackConfig, from_pulumi_mapping
from tessera.model.contract import LABEL_POOL, LABEL_POOL_KIND, LABEL_SHARING_POLICY, TAINT_GPU
from tessera.model.labels_taints import pool_labels
from tessera_pulumi.node_patches import _build_node_patch_args

NODE_PATCH = "kubernetes:core/v1:NodePatch"
SELECT = "example.com/gpu-pool"
SHARED: dict[str, Any] = {
    "name": "a", "kind": "shared", "nodeSelector": {SELECT: "a"}, "gpuModel": "T4", "gpuCount": 1, "minSize": 1, "maxSize": 2,
    "labels": {"example.com/team": "ml"}, "taints": [{"key": "example.com/dedicated", "value": "ml"}],
}
WHOLE: dict[str, Any] = {"name": "b", "kind": "nvidia", "nodeSelector": {SELECT: "b"}, "gpuModel": "T4", "gpuCount": 1, "minSize": 0, "maxSize": 2}


def existing(*pools: dict[str, Any]) -> StackConfig:
    cluster = {"provider": "existing", "name": "lab", "kubernetesVersion": "1.30.0", "kubeconfig": {"path": "~/.kube/config"}}
    return from_pulumi_mapping({"cluster": cluster, "nodePools": list(pools)})


def cluster() -> SsaNodeStore:
    store = SsaNodeStore()
    store.add("gpu-1", {SELECT: "a", "kubernetes.io/hostname": "gpu-1"})
    store.add("gpu-2", {SELECT: "b", "kubernetes.io/hostname": "gpu-2"})
    store.add("cpu-1", {"kubernetes.io/hostname": "cpu-1"})
    return store


def up(store: SsaNodeStore, config: StackConfig) -> Declared:
    """Preview lists the nodes, the program declares its patches, `pulumi up` applies them."""
    declared = declare(config, nodes=store.objects())
    for patch in declared.of_type(NODE_PATCH):
        node, manager, force, fields = patch_config(patch.inputs)
        store.apply(node, manager, fields, force=force)
    return declared


def taints(store: SsaNodeStore, node: str) -> list[tuple[str, str, str]]:
    return [(t["key"], t.get("value", ""), t["effect"]) for t in store.nodes[node].taints or []]


def test_selected_nodes_get_their_pools_labels_and_taints() -> None:
    store, config = cluster(), existing(SHARED, WHOLE)
    declared = up(store, config)
    assert store.nodes["gpu-1"].labels == {SELECT: "a", "kubernetes.io/hostname": "gpu-1", **pool_labels(config.pool("a"))}  # type: ignore[arg-type]
    assert taints(store, "gpu-1") == [(TAINT_GPU, "shared", "NoSchedule"), ("example.com/dedicated", "ml", "NoSchedule")]
    assert store.nodes["gpu-2"].labels[LABEL_POOL_KIND] == "nvidia" and taints(store, "gpu-2") == [(TAINT_GPU, "nvidia", "NoSchedule")]
    assert store.nodes["cpu-1"].labels == {"kubernetes.io/hostname": "cpu-1"} and store.nodes["cpu-1"].taints is None
    assert declared.values.get("plan") is not None
    patches = {p.inputs["metadata"]["name"]: p for p in declared.of_type(NODE_PATCH)}
    assert set(patches) == {"gpu-1", "gpu-2"}
    annotations = patches["gpu-1"].inputs["metadata"]["annotations"]
    assert annotations == {"pulumi.com/patchForce": "true", "pulumi.com/patchFieldManager": "tessera-pool-a"}
    assert all(p.provider and f"{K8S_PROVIDER}::tessera-k8s" in p.provider for p in patches.values())


def test_node_patches_are_retained_so_a_vanished_node_is_never_recreated() -> None:
    store, config = cluster(), existing(SHARED, WHOLE)
    first = up(store, config)
    assert all(first.retained[p.name] for p in first.of_type(NODE_PATCH))
    store.delete("gpu-1")  # scaled in
    second = up(store, config)
    assert [p.inputs["metadata"]["name"] for p in second.of_type(NODE_PATCH)] == ["gpu-2"]
    assert store.created_by_apply == [], "an apply to a node that is gone would create a ghost Node"


def test_removing_a_pool_removes_its_labels_and_taints() -> None:
    store = cluster()
    up(store, existing(SHARED, WHOLE))
    after = up(store, existing(WHOLE))
    assert store.nodes["gpu-1"].labels == {SELECT: "a", "kubernetes.io/hostname": "gpu-1"}
    assert store.nodes["gpu-1"].taints is None
    releases = [p for p in after.of_type(NODE_PATCH) if p.name.startswith("tessera-nodes-release-")]
    assert [(p.inputs["metadata"]["name"], p.inputs["metadata"]["annotations"]["pulumi.com/patchFieldManager"]) for p in releases] == [("gpu-1", "tessera-pool-a")]
    assert "labels" not in releases[0].inputs["metadata"] and "spec" not in releases[0].inputs
    again = up(store, existing(WHOLE))  # released: nothing left to release, nothing changes
    assert [p.inputs["metadata"]["name"] for p in again.of_type(NODE_PATCH)] == ["gpu-2"]
    assert store.nodes["gpu-1"].labels == {SELECT: "a", "kubernetes.io/hostname": "gpu-1"}


def test_a_node_moved_to_another_pool_carries_only_the_new_pools_labels() -> None:
    store = cluster()
    up(store, existing(SHARED, WHOLE))
    store.update("gpu-1", "kubectl-label", {("labels", SELECT): "b"})
    up(store, existing(SHARED, WHOLE))
    labels = store.nodes["gpu-1"].labels
    assert (labels[LABEL_POOL], labels[LABEL_POOL_KIND]) == ("b", "nvidia")
    assert LABEL_SHARING_POLICY not in labels and "example.com/team" not in labels
    assert taints(store, "gpu-1") == [(TAINT_GPU, "nvidia", "NoSchedule")]


def test_a_pool_edit_changes_exactly_its_labels() -> None:
    store = cluster()
    up(store, existing(SHARED, WHOLE))
    edited = {**SHARED, "labels": {}, "sharing": {"policy": "fixed-share"}}
    up(store, existing(edited, WHOLE))
    labels = store.nodes["gpu-1"].labels
    assert labels[LABEL_SHARING_POLICY] == "fixed-share"
    assert "example.com/team" not in labels  # removed from the pool, removed from the node
    assert store.nodes["gpu-2"].labels[LABEL_POOL] == "b"


def test_the_platform_waits_for_the_node_patches() -> None:
    declared = declare(existing(SHARED, WHOLE), nodes=cluster().objects())
    platform_urn = next(urn for urn in declared.parents if urn.endswith("::tessera-platform"))
    # a dependency on a component is a dependency on its resources: every node patch
    patches = {f"::{p.name}" for p in declared.of_type(NODE_PATCH)}
    assert patches and all(any(dep.endswith(name) for dep in declared.deps[platform_urn]) for name in patches), declared.deps[platform_urn]


def test_node_patch_args_are_typed() -> None:
    args = _build_node_patch_args(existing(SHARED).pool("a"), "gpu-1")  # type: ignore[arg-type]
    assert isinstance(args, k8s.core.v1.NodePatchArgs)
    assert isinstance(args.metadata, k8s.meta.v1.ObjectMetaPatchArgs)
    assert isinstance(args.spec, k8s.core.v1.NodeSpecPatchArgs)
    assert all(isinstance(t, k8s.core.v1.TaintPatchArgs) for t in args.spec.taints)  # type: ignore[union-attr]


@pytest.mark.parametrize("force", [True, False])
def test_the_store_follows_server_side_apply_conflicts(force: bool) -> None:
    """The stand-in itself: another manager's label with another value is a conflict unless forced."""
    from ssa_node_store import ApplyConflict

    store = SsaNodeStore()
    store.add("n", {"x": "1"}, manager="kubectl-label")
    if force:
        store.apply("n", "me", {("labels", "x"): "2"}, force=True)
        store.apply("n", "me", {}, force=True)
        assert "x" not in store.nodes["n"].labels  # forced away from kubectl, then released
    else:
        with pytest.raises(ApplyConflict):
            store.apply("n", "me", {("labels", "x"): "2"}, force=False)
        store.apply("n", "me", {("labels", "x"): "1"}, force=False)  # same value: co-owned
        store.apply("n", "me", {}, force=False)
        assert store.nodes["n"].labels == {"x": "1"}  # kubectl still owns it
