"""Node labels and taints for `provider: existing`, as a script: the fallback without Pulumi.

On TKE the node pool gives every node its pool's labels and GPU taint; on an existing cluster
`pulumi up` does it with server-side-apply node patches (`tessera_pulumi.node_patches`), and
removes them again when a pool goes. Teams that apply `tessera render` output with kubectl or a
GitOps tool instead of Pulumi get this script: the `kubectl` commands that give the nodes each
pool's `nodeSelector` picks the same labels and taints (the same functions), so the node
DaemonSet, gpu-operator and the extender see the same node as on TKE. Labels are node state, not
objects a GitOps tool can own, hence a reviewed script instead of manifests. It only adds: it
does not remove the labels of a pool that was removed.
"""
from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from tessera.model.labels_taints import AnyPool, pool_labels, pool_taints

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig


def _selector(pool: AnyPool) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(pool.node_selector.items()))


def pool_commands(pool: AnyPool) -> list[str]:
    """kubectl commands that label and taint every node the pool's selector matches (idempotent)."""
    selector = shlex.quote(_selector(pool))
    labels = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(pool_labels(pool).items()))
    commands = [f"kubectl label nodes -l {selector} --overwrite {labels}"]
    for taint in pool_taints(pool):
        commands.append(f"kubectl taint nodes -l {selector} --overwrite {shlex.quote(f'{taint.key}={taint.value}:{taint.effect}')}")
    return commands


def label_script(config: StackConfig, source: str) -> str | None:
    """A bash script for existing clusters; None on TKE (node pools carry the labels there)."""
    if not config.cluster.is_existing:
        return None
    lines = [
        "#!/usr/bin/env bash",
        f"# Rendered by `tessera render` from {source}: node labels and taints of each pool (provider existing).",
        "# Fallback for clusters `pulumi up` does not manage (Pulumi applies these itself, and removes them with the pool).",
        "# Run once with a kubeconfig for the cluster, and again when nodes join a pool. Idempotent; it never removes labels.",
        "set -euo pipefail",
    ]
    for pool in sorted(config.node_pools, key=lambda p: p.name):
        if not pool.node_selector:
            lines.append(f"# pool {pool.name}: no nodeSelector in the stack; label its nodes by hand")
            continue
        lines.append(f"# pool {pool.name} ({pool.kind})")
        lines.extend(pool_commands(pool))  # type: ignore[arg-type]  # NodePool members are the AnyPool union
    return "\n".join(lines) + "\n"
