"""Which of an existing cluster's nodes join which pool, worked out at preview.

Both routes call this: the stack-file program (`program.py`) and the package's
ExistingClusterPlatform. It lists the nodes with the stack's kubeconfig (through `tessera.kube`),
logs the membership so preview shows it, and stops with `pulumi.RunError` (after one error line per
problem) when the nodes cannot be listed or the pools cannot take them, before anything is declared.

A kubeconfig that arrives as an output (the package's `secrets` input) is read inside an apply: the
membership is then an output too, known at preview like the secret itself, and the node patches are
declared when it resolves (TesseraStack).
"""
from __future__ import annotations

import os
from dataclasses import replace
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import pulumi

from tessera.model import StackConfig
from tessera.model.membership import Membership, pool_membership
from tessera.model.problems import Problem
from tessera_pulumi import existing

NodeLister = Callable[[existing.ResolvedKubeconfig], list[dict[str, Any]]]


def stop(problems: list[Problem], hint: str) -> NoReturn:
    """Log each problem as an error line, then stop the program without a traceback."""
    for problem in problems:
        pulumi.log.error(str(problem))
    count = len(problems)
    raise pulumi.RunError(f"the stack config has {count} problem{'s' if count != 1 else ''} (listed above); nothing was deployed. {hint}") from None


def load_membership(config: StackConfig, secrets: Mapping[str, Any], list_nodes: NodeLister | None,
                    hint: str) -> Membership | pulumi.Output[Membership]:
    """The membership of an existing cluster's nodes; an output of it when the kubeconfig is one.
    `secrets`: where a `cluster.kubeconfig.secret` is looked up (`tessera:<key>`); `hint`: the
    route's own advice, after the problems, on how to check the config."""
    try:
        resolved = existing.resolve_kubeconfig(config.cluster, os.environ, secrets)
    except existing.KubeconfigError as err:
        raise pulumi.RunError(str(err)) from None
    if isinstance(resolved.kubeconfig, pulumi.Output):
        # a kubeconfig from the package's secrets: known at preview, readable only inside an apply
        return resolved.kubeconfig.apply(lambda text: _listed(config, replace(resolved, kubeconfig=text), list_nodes, hint))
    return _listed(config, resolved, list_nodes, hint)


def _listed(config: StackConfig, resolved: existing.ResolvedKubeconfig, list_nodes: NodeLister | None, hint: str) -> Membership:
    try:
        nodes = (list_nodes or existing.list_cluster_nodes)(resolved)
    except existing.NodeListError as err:
        raise pulumi.RunError(
            f"{err}; Tessera lists the nodes at preview to decide which join which pool (get/list on nodes). "
            "Nothing was deployed."
        ) from None
    membership = pool_membership(config.node_pools, nodes)
    if membership.problems:
        stop(list(membership.problems), hint)
    for line in membership.lines():
        pulumi.log.info(line)
    for note in membership.notes:
        pulumi.log.warn(note)
    return membership
