"""Pool labels and taints on an existing cluster's nodes: server-side-apply node patches.

On TKE the node pool gives its nodes their labels and taints. On `provider: existing` the nodes are
already there; for every node a pool's `nodeSelector` picks (`tessera.model.membership`, listed at
preview) this declares one `kubernetes.core.v1.NodePatch` carrying the pool's labels and taints, the
same ones a TKE node pool sets. pulumi-kubernetes applies a Patch resource with server-side apply,
under the field manager named by the `pulumi.com/patchFieldManager` annotation
(`tessera-pool-<pool>`), forcing conflicts with `pulumi.com/patchForce` (pulumi/docs,
`registry/packages/kubernetes/how-to-guides/managing-resources-with-server-side-apply.md`, "Patch a
Resource"). A label edit in the stack re-applies the patch, and server-side apply drops the labels
the manager applied before but no longer does.

Letting go of a node. pulumi-kubernetes deletes a Patch resource by applying an empty object with
its field manager (`ssa.Relinquish`, provider/pkg/ssa/ssa.go, called from provider/pkg/await's
deletion for Patch resources), which removes every field only that manager owns. But server-side
apply creates what does not exist (kube-apiserver `handlers/patch.go`: `forceAllowCreate` for apply
patches), so deleting the patch of a node that has left the cluster would create an empty ghost
Node. So node patches are `retain_on_delete` (Pulumi forgets them without calling the provider),
and a node that still carries what a pool's manager applied but is no longer that pool's - the
pool was removed, or the node no longer matches its selector - gets a *release* patch instead: the
same field manager applying only its identity, the exact request `ssa.Relinquish` sends, to a node
that exists because preview just listed it. Its labels and taints go; nothing else is touched.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pulumi
import pulumi_kubernetes as k8s

from tessera.model.labels_taints import AnyPool, TaintSpec, pool_labels, pool_taints
from tessera.model.membership import Membership, Release, field_manager

PATCH_FORCE: Final = "pulumi.com/patchForce"
PATCH_FIELD_MANAGER: Final = "pulumi.com/patchFieldManager"


def _annotations(pool: str) -> dict[str, str]:
    return {PATCH_FORCE: "true", PATCH_FIELD_MANAGER: field_manager(pool)}


def _build_taints(taints: Sequence[TaintSpec]) -> list[k8s.core.v1.TaintPatchArgs]:
    return [k8s.core.v1.TaintPatchArgs(key=t.key, value=t.value or None, effect=t.effect) for t in taints]


def _build_node_patch_args(pool: AnyPool, node: str) -> k8s.core.v1.NodePatchArgs:
    """The pool's labels and taints (as a TKE node pool would set them) for one of its nodes."""
    return k8s.core.v1.NodePatchArgs(
        metadata=k8s.meta.v1.ObjectMetaPatchArgs(name=node, labels=pool_labels(pool), annotations=_annotations(pool.name)),
        spec=k8s.core.v1.NodeSpecPatchArgs(taints=_build_taints(pool_taints(pool))),
    )


def _build_release_args(release: Release) -> k8s.core.v1.NodePatchArgs:
    """Only the node's identity under the pool's field manager: every label and taint it applied goes."""
    return k8s.core.v1.NodePatchArgs(metadata=k8s.meta.v1.ObjectMetaPatchArgs(name=release.node, annotations=_annotations(release.pool)))


class PoolNodePatches(pulumi.ComponentResource):
    """Every existing pool node's patch, and the release patches of nodes that left a pool."""

    patches: list[k8s.core.v1.NodePatch]

    def __init__(self, name: str, pools: Sequence[AnyPool], membership: Membership, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tessera:index:PoolNodePatches", name, None, opts)
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        self.patches = []
        for pool in pools:
            for node in membership.nodes_of(pool.name):
                self.patches.append(k8s.core.v1.NodePatch(f"{name}-{pool.name}-{node}", _build_node_patch_args(pool, node), opts=keep))
        for release in membership.releases:
            self.patches.append(
                k8s.core.v1.NodePatch(f"{name}-release-{release.pool}-{release.node}", _build_release_args(release), opts=keep)
            )
        self.register_outputs({"poolNodes": membership.to_json()})
