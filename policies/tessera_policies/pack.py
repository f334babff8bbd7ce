"""Adapter from the pure rules to `pulumi_policy` objects (imported only inside the pack's venv)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from tessera_policies.rules import RULES, PolicySettings, Rule

_LEVELS = {"advisory": EnforcementLevel.ADVISORY, "mandatory": EnforcementLevel.MANDATORY}


def _settings(config: Mapping[str, Any]) -> PolicySettings:
    return PolicySettings(require_image_digests=bool(config.get("requireImageDigests", False)))


def build_policy(rule: Rule) -> ResourceValidationPolicy:
    """One resource validation: decode args, run the pure rule, report each violation."""

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if args.resource_type not in rule.resource_types:
            return
        for message in rule.check(args.resource_type, args.props, _settings(args.get_config())):
            report_violation(message, None)

    schema = None
    if rule.config_schema is not None:
        schema = PolicyConfigSchema(properties={key: dict(value) for key, value in rule.config_schema.items()})
    return ResourceValidationPolicy(
        name=rule.name,
        description=rule.description,
        validate=validate,
        enforcement_level=_LEVELS[rule.enforcement],
        config_schema=schema,
    )


def build_policies() -> list[ResourceValidationPolicy]:
    return [build_policy(rule) for rule in RULES]
