"""Tessera Pulumi program: read stack config -> validate -> one TesseraStack -> exports.

Config is read here and only here; the work is in components/tessera_pulumi/program.py so that tests can drive
it under Pulumi mocks.
"""
from typing import Any

import pulumi.runtime

from tessera_pulumi.program import main


def engine_config() -> dict[str, Any]:
    """Every config value the engine gave this program (environment first, explicit settings win).

    All keys, not only the ones the model knows, so that a misspelt `tessera:*` key is reported
    instead of silently ignored.
    """
    merged: dict[str, Any] = dict(pulumi.runtime.get_config_env())
    merged.update(pulumi.runtime.config.CONFIG.get())
    return merged


main(engine_config())
