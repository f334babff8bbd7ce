"""Cluster and endpoint arguments from the stack config."""
from __future__ import annotations

from typing import Any

import pytest

from tessera.model import ClusterConfig
from tessera_pulumi.tke.cluster import _build_cluster_args, _build_endpoint_args, _build_network_spec, _max_services

BASE: dict[str, Any] = {
    "provider": "tke",
    "name": "dev",
    "kubernetesVersion": "1.30.0",
    "vpcCidr": "10.0.0.0/16",
    "subnets": [{"zone": "ap-guangzhou-3", "cidr": "10.0.1.0/24"}],
    "endpoint": {"public": True, "allowedCidrs": ["203.0.113.0/24"]},
}


def cluster(**changes: Any) -> ClusterConfig:
    return ClusterConfig.model_validate({**BASE, **changes})


def test_managed_cluster_args() -> None:
    args = _build_cluster_args(cluster(level="L20", deletionProtection=True), "vpc-1")
    assert (args.vpc_id, args.cluster_name, args.cluster_version) == ("vpc-1", "dev", "1.30.0")
    assert (args.cluster_deploy_type, args.network_type, args.cluster_level) == ("MANAGED_CLUSTER", "GR", "L20")
    assert args.cluster_cidr == "172.16.0.0/16"
    assert args.deletion_protection is True
    # endpoints are the ClusterEndpoint's job, never the Cluster's
    assert args.cluster_internet is False and args.cluster_intranet is False


@pytest.mark.parametrize(("cidr", "services"), [("172.17.0.0/20", 4096), ("172.17.0.0/24", 256)])
def test_service_cidr_size_sets_service_count(cidr: str, services: int) -> None:
    assert _max_services(cidr) == services
    assert _build_cluster_args(cluster(serviceCidr=cidr), "vpc-1").cluster_max_service_num == services


def test_public_endpoint_goes_through_the_restricting_security_group() -> None:
    args = _build_endpoint_args(cluster(), "cls-1", "subnet-1", "sg-api")
    assert (args.cluster_internet, args.cluster_internet_security_group) == (True, "sg-api")
    assert (args.cluster_intranet, args.cluster_intranet_subnet_id) == (True, "subnet-1")


def test_private_cluster_opens_no_public_endpoint() -> None:
    args = _build_endpoint_args(cluster(endpoint={"public": False}), "cls-1", "subnet-1", None)
    assert args.cluster_internet is False
    assert args.cluster_internet_security_group is None


def test_network_spec_carries_the_configured_cidrs() -> None:
    spec = _build_network_spec(cluster())
    assert (spec.vpc_cidr, spec.pod_cidr, spec.allowed_cidrs) == ("10.0.0.0/16", "172.16.0.0/16", ("203.0.113.0/24",))
    assert [(s.zone, s.cidr) for s in spec.subnets] == [("ap-guangzhou-3", "10.0.1.0/24")]
