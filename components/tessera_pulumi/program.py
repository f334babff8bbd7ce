"""The Pulumi program's body: read stack config -> validate -> one TesseraStack -> exports.

`__main__.py` reads the engine's config and calls `main()`. Validation happens before any resource is declared: a bad
config is reported as `path: message` lines (the same lines `tessera validate` prints) and the
program stops with `pulumi.RunError`, which Pulumi shows without a traceback.

On an existing cluster the program then lists the cluster's nodes (with the stack's kubeconfig,
through `tessera.kube`) and works out which nodes join which pool; preview prints it, the stack
exports it as `poolNodes`, and a node the pools cannot take (picked by two pools, or carrying a
taint its pool does not declare) stops the program the same way, before anything is declared.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import pulumi
import pulumi.runtime

from tessera.model import ConfigError, StackConfig, from_pulumi_mapping
from tessera.model.loader import select_engine_config
from tessera.model.membership import Membership, pool_membership
from tessera.model.problems import Problem
from tessera_pulumi import existing
from tessera_pulumi.stack import TesseraStack

NodeLister = Callable[[existing.ResolvedKubeconfig], list[dict[str, Any]]]


def load_config(raw: Mapping[str, Any]) -> StackConfig:
    """Validated stack config, or `pulumi.RunError` after logging one `path: message` line per problem.

    `raw` is every config value the engine gave the program (`__main__.py` reads it). A key in a
    namespace nobody reads (`tesera:quotas`, `foo:bar`) is a problem like a misspelt `tessera:` key."""
    try:
        return from_pulumi_mapping(select_engine_config(raw))
    except ConfigError as err:
        _stop(err.problems, f"Fix them and check with `tessera validate stacks/Pulumi.{pulumi.get_stack()}.yaml`.")


def _stop(problems: list[Problem], hint: str) -> NoReturn:
    for problem in problems:
        pulumi.log.error(str(problem))
    count = len(problems)
    raise pulumi.RunError(f"the stack config has {count} problem{'s' if count != 1 else ''} (listed above); nothing was deployed. {hint}") from None


def load_membership(config: StackConfig, raw: Mapping[str, Any], list_nodes: NodeLister | None = None) -> Membership:
    """Which of the existing cluster's nodes join which pool; `pulumi.RunError` when the nodes cannot
    be listed or the pools cannot take them. Logs the membership, so preview shows it."""
    try:
        resolved = existing.resolve_kubeconfig(config.cluster, os.environ, raw)
        nodes = (list_nodes or existing.list_cluster_nodes)(resolved)
    except existing.KubeconfigError as err:
        raise pulumi.RunError(str(err)) from None
    except existing.NodeListError as err:
        raise pulumi.RunError(
            f"{err}; Tessera lists the nodes at preview to decide which join which pool (get/list on nodes). "
            "Nothing was deployed."
        ) from None
    membership = pool_membership(config.node_pools, nodes)
    if membership.problems:
        _stop(list(membership.problems), f"Check with `tessera plan stacks/Pulumi.{pulumi.get_stack()}.yaml --kubeconfig ...`.")
    for line in membership.lines():
        pulumi.log.info(line)
    for note in membership.notes:
        pulumi.log.warn(note)
    return membership


def main(raw_config: Mapping[str, Any], list_nodes: NodeLister | None = None) -> None:
    """Declare the stack from the engine's config values (key -> value, JSON text for objects).
    `list_nodes`: how an existing cluster's nodes are listed (default: through its kubeconfig)."""
    config = load_config(raw_config)
    membership = load_membership(config, raw_config, list_nodes) if config.cluster.is_existing else None
    stack = TesseraStack("tessera", config, secrets=raw_config, membership=membership)
    pulumi.export("clusterId", stack.cluster_id)
    pulumi.export("kubeconfig", stack.kubeconfig)
    pulumi.export("poolNames", stack.pool_names)
    pulumi.export("plan", stack.plan)
    if membership is not None:
        pulumi.export("poolNodes", membership.to_json())
