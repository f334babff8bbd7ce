"""Which admission features the target cluster's Kubernetes version has (for the webhook and the
re-partitioning policy, whose safest form needs recent APIs)."""
from __future__ import annotations

from typing import Final

from tessera.model.stack import StackConfig

# Rendering assumes this when an `existing` cluster's version is not given (as the rest of the stack does).
ASSUMED_VERSION: Final = (1, 30)
MATCH_CONDITIONS_SINCE: Final = (1, 28)  # webhook matchConditions: beta and on by default in 1.28, GA in 1.30
ADMISSION_POLICY_SINCE: Final = (1, 30)  # admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy: GA in 1.30


def kubernetes_minor(config: StackConfig) -> tuple[int, int]:
    version = config.cluster.kubernetes_version
    if not version:
        return ASSUMED_VERSION
    major, minor, *_ = version.split(".")
    return int(major), int(minor)


def has_match_conditions(config: StackConfig) -> bool:
    return kubernetes_minor(config) >= MATCH_CONDITIONS_SINCE


def has_validating_admission_policy(config: StackConfig) -> bool:
    return kubernetes_minor(config) >= ADMISSION_POLICY_SINCE
