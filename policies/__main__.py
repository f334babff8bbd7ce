"""Tessera policy pack: `pulumi preview --policy-pack policies [--policy-pack-config FILE]`.

Thin adapter: the rules are pure functions in `tessera_policies.rules`; this file only turns them
into `pulumi_policy` resource validations and passes the per-policy config through.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from tessera_policies.rules import RULES, PolicySettings, Rule

_LEVELS = {"advisory": EnforcementLevel.ADVISORY, "mandatory": EnforcementLevel.MANDATORY}


def _settings(config: Mapping[str, Any]) -> PolicySettings:
    return PolicySettings(require_image_digests=bool(config.get("requireImageDigests", False)))


def _policy(rule: Rule) -> ResourceValidationPolicy:
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


PolicyPack(name="tessera", enforcement_level=EnforcementLevel.MANDATORY, policies=[_policy(rule) for rule in RULES])
