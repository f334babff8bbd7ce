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


def engine_secret_keys() -> frozenset[str]:
    """The config keys the engine holds as secrets (`pulumi config set --secret`): it lists them in
    PULUMI_CONFIG_SECRET_KEYS for the program, or hands them over with the config (mocks)."""
    listed = set(pulumi.runtime.get_config_secret_keys_env())
    return frozenset(key for key in engine_config() if key in listed or pulumi.runtime.is_config_secret(key))


main(engine_config(), secret_keys=engine_secret_keys())
