"""Security-group rules are never wider than the stack config allows."""
from __future__ import annotations

import ipaddress

import pytest

from tessera_pulumi.tke.network import (
    ANY_IPV4,
    NetworkSpec,
    SubnetSpec,
    _build_endpoint_ingress,
    _build_node_egress,
    _build_node_ingress,
    _build_subnet_args,
    _build_vpc_args,
    _ingress_args,
)

SPEC = NetworkSpec(
    name="dev",
    vpc_cidr="10.0.0.0/16",
    pod_cidr="172.16.0.0/16",
    subnets=(SubnetSpec("ap-guangzhou-3", "10.0.1.0/24"),),
    endpoint_public=True,
    allowed_cidrs=("203.0.113.0/24", "198.51.100.7/32"),
    tags=(("tessera-cluster", "dev"),),
)


def _accepted(rules: tuple) -> list[str]:  # type: ignore[type-arg]
    return [r.cidr for r in rules if r.action == "ACCEPT"]


def test_endpoint_accepts_https_from_allowed_cidrs_only() -> None:
    rules = _build_endpoint_ingress(SPEC)
    assert [(r.cidr, r.protocol, r.port) for r in rules if r.action == "ACCEPT"] == [
        ("203.0.113.0/24", "TCP", "443"),
        ("198.51.100.7/32", "TCP", "443"),
    ]
    assert (rules[-1].action, rules[-1].cidr) == ("DROP", ANY_IPV4)


def test_node_ingress_only_from_vpc_and_pods() -> None:
    rules = _build_node_ingress(SPEC)
    assert _accepted(rules) == ["10.0.0.0/16", "172.16.0.0/16"]
    assert (rules[-1].action, rules[-1].cidr) == ("DROP", ANY_IPV4)


@pytest.mark.parametrize("builder", [_build_node_ingress, _build_endpoint_ingress])
def test_no_ingress_rule_accepts_the_internet(builder) -> None:  # type: ignore[no-untyped-def]
    assert all(ipaddress.ip_network(cidr).prefixlen > 0 for cidr in _accepted(builder(SPEC)))


def test_node_egress_is_open_for_image_pulls() -> None:
    assert _accepted(_build_node_egress(SPEC)) == [ANY_IPV4]


def test_rules_become_typed_ingress_args_in_order() -> None:
    args = _ingress_args(_build_endpoint_ingress(SPEC))
    assert [(a.action, a.cidr_block, a.port) for a in args] == [
        ("ACCEPT", "203.0.113.0/24", "443"),
        ("ACCEPT", "198.51.100.7/32", "443"),
        ("DROP", ANY_IPV4, "all"),
    ]


def test_vpc_and_subnet_args() -> None:
    vpc = _build_vpc_args(SPEC)
    assert (vpc.cidr_block, vpc.name, vpc.tags) == ("10.0.0.0/16", "dev-vpc", {"tessera-cluster": "dev"})
    subnet = _build_subnet_args(SPEC, SPEC.subnets[0], "vpc-1")
    assert (subnet.availability_zone, subnet.cidr_block, subnet.vpc_id) == ("ap-guangzhou-3", "10.0.1.0/24", "vpc-1")
