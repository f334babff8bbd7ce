"""Drives the pack's policies through the real pulumi-policy SDK (run by policies/test.sh)."""
from __future__ import annotations

import sys

from pulumi_policy import PolicyResourceOptions, ResourceValidationArgs, PolicyCustomTimeouts

from tessera_policies.pack import build_policies

NODE_POOL = "tencentcloud:Kubernetes/nodePool:NodePool"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def violations(rtype: str, props: dict, config: dict | None = None) -> list[str]:
    found: list[str] = []
    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    for policy in build_policies():
        args = ResourceValidationArgs(rtype, props, f"urn:pulumi:s::p::{rtype}::r", "r", opts, None, config)
        policy.validate(args, lambda message, urn=None, name=policy.name: found.append(f"{name}: {message}"))
    return found


def main() -> int:
    good = {"minSize": 0, "maxSize": 2, "desiredCapacity": 1, "deleteKeepInstance": False,
            "labels": {"tessera.dev/pool-kind": "nvidia"}, "taints": [{"key": "tessera.dev/gpu", "value": "nvidia", "effect": "NoSchedule"}]}
    checks = [
        ("good node pool passes", violations(NODE_POOL, good) == []),
        ("kept instances are reported", any("deleteKeepInstance" in v for v in violations(NODE_POOL, {**good, "deleteKeepInstance": True}))),
        ("tag passes without config", violations(DEPLOYMENT, {"spec": {"template": {"spec": {"containers": [{"image": "x:1"}]}}}}) == []),
        ("tag refused with requireImageDigests", any("digest" in v for v in violations(
            DEPLOYMENT, {"spec": {"template": {"spec": {"containers": [{"image": "x:1"}]}}}}, {"requireImageDigests": True}))),
    ]
    for name, ok in checks:
        print(("ok   " if ok else "FAIL ") + name)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
