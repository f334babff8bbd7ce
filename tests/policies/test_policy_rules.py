"""The policy pack's rules as pure functions (the pack itself needs pulumi-policy in its own venv)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "policies"))  # the pack's package is not installed
from tessera_policies.rules import (  # noqa: E402
    CLUSTER,
    CLUSTER_ENDPOINT,
    GROUP_RULE,
    GROUP_RULE_SET,
    NODE_POOL,
    RULES,
    PolicySettings,
    evaluate,
)

GOOD_POOL: dict[str, Any] = {
    "minSize": 0,
    "maxSize": 2,
    "desiredCapacity": 1,
    "deleteKeepInstance": False,
    "labels": {"tessera.dev/pool-kind": "shared"},
    "taints": [{"key": "tessera.dev/gpu", "value": "shared", "effect": "NoSchedule"}],
}
DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def _deployment(image: str) -> dict[str, Any]:
    return {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}


def _cronjob(image: str) -> dict[str, Any]:
    return {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"initContainers": [{"name": "i", "image": image}], "containers": []}}}}}}


DIGEST = "ghcr.io/tessera-gpu/tessera@sha256:" + "a" * 64

# (resource type, props, settings, rule expected to fire or None for no violation)
CASES: list[tuple[str, str, dict[str, Any], PolicySettings, str | None]] = [
    ("good pool", NODE_POOL, GOOD_POOL, PolicySettings(), None),
    ("pool keeps instances", NODE_POOL, {**GOOD_POOL, "deleteKeepInstance": True}, PolicySettings(), "tessera-node-pool-deletes-instances"),
    ("pool default keeps instances", NODE_POOL, {k: v for k, v in GOOD_POOL.items() if k != "deleteKeepInstance"}, PolicySettings(), "tessera-node-pool-deletes-instances"),
    ("untainted gpu pool", NODE_POOL, {**GOOD_POOL, "taints": []}, PolicySettings(), "tessera-gpu-pool-tainted"),
    ("non-gpu pool needs no taint", NODE_POOL, {**GOOD_POOL, "labels": {}, "taints": []}, PolicySettings(), None),
    ("min above max", NODE_POOL, {**GOOD_POOL, "minSize": 3, "maxSize": 2, "desiredCapacity": 2}, PolicySettings(), "tessera-autoscaling-bounds"),
    ("desired outside bounds", NODE_POOL, {**GOOD_POOL, "desiredCapacity": 5}, PolicySettings(), "tessera-autoscaling-bounds"),
    ("world-open ingress", GROUP_RULE_SET, {"ingresses": [{"action": "ACCEPT", "cidrBlock": "0.0.0.0/0", "port": "443"}]}, PolicySettings(), "tessera-security-ingress-not-world-open"),
    ("world-open ipv6 ingress", GROUP_RULE_SET, {"ingresses": [{"action": "ACCEPT", "ipv6CidrBlock": "::/0"}]}, PolicySettings(), "tessera-security-ingress-not-world-open"),
    ("world drop is fine", GROUP_RULE_SET, {"ingresses": [{"action": "DROP", "cidrBlock": "0.0.0.0/0"}], "egresses": [{"action": "ACCEPT", "cidrBlock": "0.0.0.0/0"}]}, PolicySettings(), None),
    ("single rule world-open", GROUP_RULE, {"type": "ingress", "policy": "accept", "cidrIp": "0.0.0.0/0"}, PolicySettings(), "tessera-security-ingress-not-world-open"),
    ("endpoint without sg", CLUSTER_ENDPOINT, {"clusterInternet": True}, PolicySettings(), "tessera-public-endpoint-restricted"),
    ("endpoint world policy", CLUSTER_ENDPOINT, {"clusterInternet": True, "clusterInternetSecurityGroup": "sg-1", "managedClusterInternetSecurityPolicies": ["0.0.0.0/0"]}, PolicySettings(), "tessera-public-endpoint-restricted"),
    ("endpoint with sg", CLUSTER_ENDPOINT, {"clusterInternet": True, "clusterInternetSecurityGroup": "sg-1"}, PolicySettings(), None),
    ("private endpoint", CLUSTER_ENDPOINT, {"clusterInternet": False, "clusterIntranet": True}, PolicySettings(), None),
    ("cluster opens internet itself", CLUSTER, {"clusterInternet": True}, PolicySettings(), "tessera-public-endpoint-restricted"),
    ("tag allowed in dev", DEPLOYMENT, _deployment("ghcr.io/tessera-gpu/tessera:0.1.0"), PolicySettings(), None),
    ("tag refused in prod", DEPLOYMENT, _deployment("ghcr.io/tessera-gpu/tessera:0.1.0"), PolicySettings(require_image_digests=True), "tessera-images-pinned"),
    ("digest accepted in prod", DEPLOYMENT, _deployment(DIGEST), PolicySettings(require_image_digests=True), None),
    ("cronjob init container checked", "kubernetes:batch/v1:CronJob", _cronjob("busybox:1.36"), PolicySettings(require_image_digests=True), "tessera-images-pinned"),
]


@pytest.mark.parametrize(("case", "rtype", "props", "settings", "rule"), CASES, ids=[c[0] for c in CASES])
def test_rule_table(case: str, rtype: str, props: dict[str, Any], settings: PolicySettings, rule: str | None) -> None:
    fired = {name for name, _ in evaluate(rtype, props, settings)}
    assert fired == ({rule} if rule else set())


def test_unknown_sizes_during_preview_are_not_violations() -> None:
    assert evaluate(NODE_POOL, {**GOOD_POOL, "minSize": None, "maxSize": None}) == []


def test_rules_have_unique_names_and_say_what_they_check() -> None:
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names)) >= 4
    assert all(rule.description and rule.resource_types for rule in RULES)
