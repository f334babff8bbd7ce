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

from collections.abc import Collection, Mapping
from typing import Any

import pulumi
import pulumi.runtime

from tessera.model import ConfigError, StackConfig, from_pulumi_mapping
from tessera.model.loader import NAMESPACE, not_secret_problem, select_engine_config
from tessera.model.problems import Problem
from tessera.model.secrets import named_by
from tessera_pulumi.membership import NodeLister, load_membership, stop
from tessera_pulumi.stack import TesseraStack


def load_config(raw: Mapping[str, Any], secret_keys: Collection[str] | None = None) -> StackConfig:
    """Validated stack config, or `pulumi.RunError` after logging one `path: message` line per problem.

    `raw` is every config value the engine gave the program (`__main__.py` reads it). A key in a
    namespace nobody reads (`tesera:quotas`, `foo:bar`) is a problem like a misspelt `tessera:` key.
    Every secret a setting names (`tessera.model.secrets`) must be set, before anything is
    declared; `secret_keys`, the keys the engine holds as secrets: such a key set in clear is a
    problem too (None: not checked)."""
    try:
        config = from_pulumi_mapping(select_engine_config(raw))
    except ConfigError as err:
        stop(err.problems, _HINT.format(stack=pulumi.get_stack()))
    problems: list[Problem] = []
    for key, field in named_by(config).items():
        name = f"{NAMESPACE}:{key}"
        if name not in raw:
            problems.append(Problem(field.dotted, f"{name} is not set; run `{field.set_command(key)}`"))
        elif secret_keys is not None and name not in secret_keys:
            problems.append(Problem(name, not_secret_problem(key, field)))
    if problems:
        stop(problems, _HINT.format(stack=pulumi.get_stack()))
    return config


_HINT = "Fix them and check with `tessera validate stacks/Pulumi.{stack}.yaml`."


def main(raw_config: Mapping[str, Any], list_nodes: NodeLister | None = None, secret_keys: Collection[str] | None = None) -> None:
    """Declare the stack from the engine's config values (key -> value, JSON text for objects).
    `list_nodes`: how an existing cluster's nodes are listed (default: through its kubeconfig).
    `secret_keys`: the config keys the engine holds as secrets (see `load_config`)."""
    config = load_config(raw_config, secret_keys)
    hint = f"Check with `tessera plan stacks/Pulumi.{pulumi.get_stack()}.yaml --kubeconfig ...`."
    membership = load_membership(config, raw_config, list_nodes, hint) if config.cluster.is_existing else None
    stack = TesseraStack("tessera", config, secrets=raw_config, membership=membership)
    pulumi.export("clusterId", stack.cluster_id)
    pulumi.export("kubeconfig", stack.kubeconfig)
    pulumi.export("poolNames", stack.pool_names)
    pulumi.export("plan", stack.plan)
    if membership is not None:
        pulumi.export("poolNodes", membership.apply(lambda known: known.to_json()) if isinstance(membership, pulumi.Output) else membership.to_json())
