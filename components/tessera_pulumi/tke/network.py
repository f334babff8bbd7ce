"""VPC, subnets and security groups for a Tessera TKE cluster.

Two security groups, each with exactly one `GroupRuleSet` (the rule set owns all rules of its group,
so nothing else can widen it):

* nodes: ingress only from inside the VPC and the pod network; egress open (image pulls, TKE
  control plane, package mirrors); everything else explicitly dropped.
* API endpoint (only when the endpoint is public): TCP 443 from each `endpoint.allowedCidrs`
  entry, nothing else. The rules are never wider than the stack config allows.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import pulumi
import tencentcloud_iac_pulumi as tc

ANY_IPV4: Final = "0.0.0.0/0"
API_SERVER_PORT: Final = "443"

RuleAction = Literal["ACCEPT", "DROP"]


@dataclass(frozen=True)
class SubnetSpec:
    """One subnet of the cluster VPC (one per availability zone in the stack config)."""

    zone: str
    cidr: str


@dataclass(frozen=True)
class NetworkSpec:
    """What the network needs from the stack config, as plain values."""

    name: str
    vpc_cidr: str
    pod_cidr: str
    subnets: tuple[SubnetSpec, ...]
    endpoint_public: bool
    allowed_cidrs: tuple[str, ...]
    tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RuleSpec:
    """One security-group rule, before it becomes a typed provider input."""

    action: RuleAction
    cidr: str
    protocol: str  # TCP | UDP | ICMP | ALL
    port: str  # "all", "443", "80-90"
    description: str


def _build_node_ingress(spec: NetworkSpec) -> tuple[RuleSpec, ...]:
    """Nodes accept traffic from the VPC (kubelet, NodePorts behind CLB) and the pod network only."""
    return (
        RuleSpec("ACCEPT", spec.vpc_cidr, "ALL", "all", "tessera: traffic from inside the VPC"),
        RuleSpec("ACCEPT", spec.pod_cidr, "ALL", "all", "tessera: pod network (GlobalRouter)"),
        RuleSpec("DROP", ANY_IPV4, "ALL", "all", "tessera: everything else"),
    )


def _build_node_egress(spec: NetworkSpec) -> tuple[RuleSpec, ...]:
    # Nodes must reach image registries, the TKE control plane and driver mirrors.
    return (RuleSpec("ACCEPT", ANY_IPV4, "ALL", "all", "tessera: nodes reach registries and the control plane"),)


def _build_endpoint_ingress(spec: NetworkSpec) -> tuple[RuleSpec, ...]:
    """The public API endpoint accepts HTTPS from the configured CIDRs and nothing else."""
    accepts = tuple(
        RuleSpec("ACCEPT", cidr, "TCP", API_SERVER_PORT, f"tessera: kube-apiserver from {cidr}") for cidr in spec.allowed_cidrs
    )
    return accepts + (RuleSpec("DROP", ANY_IPV4, "ALL", "all", "tessera: everything else"),)


def _ingress_args(rules: Sequence[RuleSpec]) -> list[tc.security.GroupRuleSetIngressArgs]:
    return [
        tc.security.GroupRuleSetIngressArgs(action=r.action, cidr_block=r.cidr, protocol=r.protocol, port=r.port, description=r.description)
        for r in rules
    ]


def _egress_args(rules: Sequence[RuleSpec]) -> list[tc.security.GroupRuleSetEgressArgs]:
    return [
        tc.security.GroupRuleSetEgressArgs(action=r.action, cidr_block=r.cidr, protocol=r.protocol, port=r.port, description=r.description)
        for r in rules
    ]


def _build_vpc_args(spec: NetworkSpec) -> tc.vpc.InstanceArgs:
    return tc.vpc.InstanceArgs(cidr_block=spec.vpc_cidr, name=f"{spec.name}-vpc", tags=dict(spec.tags))


def _build_subnet_args(spec: NetworkSpec, subnet: SubnetSpec, vpc_id: pulumi.Input[str]) -> tc.subnet.InstanceArgs:
    return tc.subnet.InstanceArgs(
        availability_zone=subnet.zone,
        cidr_block=subnet.cidr,
        vpc_id=vpc_id,
        name=f"{spec.name}-{subnet.zone}",
        tags=dict(spec.tags),
    )


class TkeNetwork(pulumi.ComponentResource):
    """VPC + one subnet per zone + node and API-endpoint security groups."""

    vpc_id: pulumi.Output[str]
    subnet_ids: list[pulumi.Output[str]]
    subnet_ids_by_zone: dict[str, pulumi.Output[str]]
    node_security_group_id: pulumi.Output[str]
    endpoint_security_group_id: pulumi.Output[str] | None

    def __init__(self, name: str, spec: NetworkSpec, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tessera:index:TkeNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        vpc = tc.vpc.Instance(f"{name}-vpc", _build_vpc_args(spec), opts=child)
        self.vpc_id = vpc.id
        self.subnet_ids_by_zone = {
            s.zone: tc.subnet.Instance(f"{name}-subnet-{s.zone}", _build_subnet_args(spec, s, vpc.id), opts=child).id for s in spec.subnets
        }
        self.subnet_ids = list(self.subnet_ids_by_zone.values())

        node_sg = tc.security.Group(
            f"{name}-nodes",
            tc.security.GroupArgs(name=f"{spec.name}-nodes", description="Tessera GPU nodes", tags=dict(spec.tags)),
            opts=child,
        )
        tc.security.GroupRuleSet(
            f"{name}-nodes-rules",
            tc.security.GroupRuleSetArgs(
                security_group_id=node_sg.id,
                ingresses=_ingress_args(_build_node_ingress(spec)),
                egresses=_egress_args(_build_node_egress(spec)),
            ),
            opts=child,
        )
        self.node_security_group_id = node_sg.id

        self.endpoint_security_group_id = None
        if spec.endpoint_public:
            api_sg = tc.security.Group(
                f"{name}-apiserver",
                tc.security.GroupArgs(name=f"{spec.name}-apiserver", description="Tessera public kube-apiserver endpoint", tags=dict(spec.tags)),
                opts=child,
            )
            tc.security.GroupRuleSet(
                f"{name}-apiserver-rules",
                tc.security.GroupRuleSetArgs(security_group_id=api_sg.id, ingresses=_ingress_args(_build_endpoint_ingress(spec))),
                opts=child,
            )
            self.endpoint_security_group_id = api_sg.id

        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "subnetIds": self.subnet_ids,
                "nodeSecurityGroupId": self.node_security_group_id,
                "endpointSecurityGroupId": self.endpoint_security_group_id,
            }
        )
