"""The Pulumi program's body: read stack config -> validate -> one TesseraStack -> exports.

`__main__.py` reads the engine's config and calls `main()`. Validation happens before any resource is declared: a bad
config is reported as `path: message` lines (the same lines `tessera validate` prints) and the
program stops with `pulumi.RunError`, which Pulumi shows without a traceback.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi.runtime

from tessera.model import ConfigError, StackConfig, from_pulumi_mapping
from tessera.model.loader import select_engine_config
from tessera_pulumi.stack import TesseraStack


def load_config(raw: Mapping[str, Any]) -> StackConfig:
    """Validated stack config, or `pulumi.RunError` after logging one `path: message` line per problem.

    `raw` is every config value the engine gave the program (`__main__.py` reads it). A key in a
    namespace nobody reads (`tesera:quotas`, `foo:bar`) is a problem like a misspelt `tessera:` key."""
    try:
        return from_pulumi_mapping(select_engine_config(raw))
    except ConfigError as err:
        for problem in err.problems:
            pulumi.log.error(str(problem))
        count = len(err.problems)
        raise pulumi.RunError(
            f"the stack config has {count} problem{'s' if count != 1 else ''} (listed above); nothing was deployed. "
            f"Fix them and check with `tessera validate stacks/Pulumi.{pulumi.get_stack()}.yaml`."
        ) from None


def main(raw_config: Mapping[str, Any]) -> None:
    """Declare the stack from the engine's config values (key -> value, JSON text for objects)."""
    config = load_config(raw_config)
    stack = TesseraStack("tessera", config, secrets=raw_config)
    pulumi.export("clusterId", stack.cluster_id)
    pulumi.export("kubeconfig", stack.kubeconfig)
    pulumi.export("poolNames", stack.pool_names)
    pulumi.export("plan", stack.plan)
