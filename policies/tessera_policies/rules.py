"""Tessera's preview-time guardrails as pure functions.

Each rule looks at one resource as the Pulumi engine sees it (type token + input properties with
the provider's camelCase names) and returns human-readable violations. The policy pack entry point
(`policies/__main__.py`) wraps them for `pulumi_policy`; this module has no dependency on it, so
the rules are unit-tested in the main environment (`tests/policies/`) and can be run against the
resources a Pulumi-mocks test of the program declares.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

EnforcementLevel = Literal["advisory", "mandatory"]

NODE_POOL: Final = "tencentcloud:Kubernetes/nodePool:NodePool"
CLUSTER: Final = "tencentcloud:Kubernetes/cluster:Cluster"
CLUSTER_ENDPOINT: Final = "tencentcloud:Kubernetes/clusterEndpoint:ClusterEndpoint"
GROUP_RULE_SET: Final = "tencentcloud:Security/groupRuleSet:GroupRuleSet"
GROUP_RULE: Final = "tencentcloud:Security/groupRule:GroupRule"
WORKLOAD_TYPES: Final = (
    "kubernetes:apps/v1:Deployment",
    "kubernetes:apps/v1:DaemonSet",
    "kubernetes:apps/v1:StatefulSet",
    "kubernetes:batch/v1:Job",
    "kubernetes:batch/v1:CronJob",
    "kubernetes:core/v1:Pod",
)

# Names shared with tessera/model/contract.py; repeated here because a policy pack runs in its own
# virtualenv without the tessera package.
LABEL_POOL_KIND: Final = "tessera.dev/pool-kind"
TAINT_GPU: Final = "tessera.dev/gpu"


@dataclass(frozen=True)
class PolicySettings:
    """Knobs a stack can set through the policy pack config (`--policy-pack-config FILE`)."""

    require_image_digests: bool = False
    """Default False: dev stacks use tags; prod sets true so every image is pinned by digest."""


Check = Callable[[str, Mapping[str, Any], PolicySettings], list[str]]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    enforcement: EnforcementLevel
    check: Check
    resource_types: tuple[str, ...] = field(default=())
    config_schema: Mapping[str, Mapping[str, Any]] | None = None  # JSON schema properties of the rule's config


def _is_world(cidr: object) -> bool:
    """True for a CIDR that covers the whole IPv4 or IPv6 internet (0.0.0.0/0, ::/0, or written loosely)."""
    if not isinstance(cidr, str) or not cidr:
        return False
    try:
        return ipaddress.ip_network(cidr.strip(), strict=False).prefixlen == 0
    except ValueError:
        return False


def check_security_ingress_not_world_open(rtype: str, props: Mapping[str, Any], _: PolicySettings) -> list[str]:
    """No security group accepts inbound traffic from the whole internet."""
    out: list[str] = []
    if rtype == GROUP_RULE_SET:
        for i, rule in enumerate(props.get("ingresses") or []):
            if str(rule.get("action", "")).upper() != "ACCEPT":
                continue
            for key in ("cidrBlock", "ipv6CidrBlock"):
                if _is_world(rule.get(key)):
                    out.append(f"ingresses[{i}] accepts {rule.get(key)} on port {rule.get('port', 'all')}; allow only the CIDRs that need access")
    elif rtype == GROUP_RULE:
        if str(props.get("type", "")).lower() == "ingress" and str(props.get("policy", "")).lower() == "accept" and _is_world(props.get("cidrIp")):
            out.append(f"ingress rule accepts {props.get('cidrIp')}; allow only the CIDRs that need access")
    return out


def check_public_endpoint_restricted(rtype: str, props: Mapping[str, Any], _: PolicySettings) -> list[str]:
    """A public kube-apiserver endpoint goes through a security group and never admits 0.0.0.0/0."""
    if not props.get("clusterInternet"):
        return []
    out: list[str] = []
    if rtype == CLUSTER:
        out.append("opens the public endpoint on the Cluster itself; use a ClusterEndpoint with a restricting security group")
    if rtype == CLUSTER_ENDPOINT and not props.get("clusterInternetSecurityGroup"):
        out.append("public endpoint has no clusterInternetSecurityGroup; set endpoint.allowedCidrs in the stack config")
    for cidr in props.get("managedClusterInternetSecurityPolicies") or []:
        if _is_world(cidr):
            out.append(f"public endpoint admits {cidr}")
    return out


def check_node_pool_deletes_instances(rtype: str, props: Mapping[str, Any], _: PolicySettings) -> list[str]:
    """Deleting a node pool must delete its CVMs too (the provider keeps them by default, and they keep billing)."""
    if props.get("deleteKeepInstance") is not False:
        return [f"deleteKeepInstance is {props.get('deleteKeepInstance')!r}; set it to false so GPU instances are not left running"]
    return []


def check_gpu_pool_tainted(rtype: str, props: Mapping[str, Any], _: PolicySettings) -> list[str]:
    """Every Tessera GPU pool carries the NoSchedule GPU taint, so only GPU work lands there."""
    labels = props.get("labels") or {}
    kind = labels.get(LABEL_POOL_KIND)
    if kind is None:
        return []
    for taint in props.get("taints") or []:
        if taint.get("key") == TAINT_GPU and taint.get("effect") == "NoSchedule":
            return []
    return [f"GPU pool of kind {kind!r} lacks the taint {TAINT_GPU}={kind}:NoSchedule"]


def check_autoscaling_bounds(rtype: str, props: Mapping[str, Any], _: PolicySettings) -> list[str]:
    """min <= desired <= max, all non-negative, max > 0."""
    low, high, desired = props.get("minSize"), props.get("maxSize"), props.get("desiredCapacity")
    if not isinstance(low, int) or not isinstance(high, int):
        return []  # unknown during preview; the provider validates the final values
    out: list[str] = []
    if low < 0 or high <= 0 or low > high:
        out.append(f"autoscaling bounds min={low} max={high} are invalid (need 0 <= min <= max, max > 0)")
    if isinstance(desired, int) and not (low <= desired <= high):
        out.append(f"desired={desired} is outside min={low}..max={high}")
    return out


def _container_images(props: Mapping[str, Any], rtype: str) -> list[str]:
    spec: Any = props.get("spec") or {}
    if rtype.endswith(":Pod"):
        pod = spec
    elif rtype.endswith(":CronJob"):
        pod = (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    else:
        pod = (spec.get("template") or {}).get("spec") or {}
    containers = list(pod.get("initContainers") or []) + list(pod.get("containers") or [])
    return [str(c.get("image", "")) for c in containers]


def check_images_pinned(rtype: str, props: Mapping[str, Any], settings: PolicySettings) -> list[str]:
    """With require_image_digests (prod), every container image is referenced by @sha256 digest."""
    if not settings.require_image_digests:
        return []
    return [f"image {image!r} is not pinned by digest (use name@sha256:...)" for image in _container_images(props, rtype) if "@sha256:" not in image]


RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "tessera-security-ingress-not-world-open",
        "Security groups do not accept inbound traffic from 0.0.0.0/0 or ::/0.",
        "mandatory",
        check_security_ingress_not_world_open,
        (GROUP_RULE_SET, GROUP_RULE),
    ),
    Rule(
        "tessera-public-endpoint-restricted",
        "A public kube-apiserver endpoint is restricted by a security group to the configured CIDRs.",
        "mandatory",
        check_public_endpoint_restricted,
        (CLUSTER, CLUSTER_ENDPOINT),
    ),
    Rule(
        "tessera-node-pool-deletes-instances",
        "Node pools set deleteKeepInstance=false so GPU CVMs are not orphaned.",
        "mandatory",
        check_node_pool_deletes_instances,
        (NODE_POOL,),
    ),
    Rule(
        "tessera-gpu-pool-tainted",
        "Every Tessera GPU node pool carries the tessera.dev/gpu NoSchedule taint.",
        "mandatory",
        check_gpu_pool_tainted,
        (NODE_POOL,),
    ),
    Rule(
        "tessera-autoscaling-bounds",
        "Node pool autoscaling bounds are consistent (0 <= min <= desired <= max, max > 0).",
        "mandatory",
        check_autoscaling_bounds,
        (NODE_POOL,),
    ),
    Rule(
        "tessera-images-pinned",
        "With requireImageDigests (prod), every workload image is pinned by digest.",
        "mandatory",
        check_images_pinned,
        WORKLOAD_TYPES,
        MappingProxyType({"requireImageDigests": MappingProxyType({"type": "boolean", "default": False})}),
    ),
)


def evaluate(rtype: str, props: Mapping[str, Any], settings: PolicySettings = PolicySettings(), rules: Sequence[Rule] = RULES) -> list[tuple[str, str]]:
    """All (rule name, violation) pairs for one resource."""
    return [(rule.name, message) for rule in rules if rtype in rule.resource_types for message in rule.check(rtype, props, settings)]
