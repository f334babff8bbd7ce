"""A managed TKE cluster with its network, GPU node pools and API endpoint; kubeconfig as a secret.

Order of creation (what depends on what):
VPC/subnets/security groups -> Cluster -> node pools (system + one per GPU pool) -> ClusterEndpoint.
The endpoint comes last because TKE enables it only once the cluster has its nodes (provider docs
recommend depends_on the node pools); the kubeconfig is read from it.
"""
from __future__ import annotations

import ipaddress
from typing import Final

import pulumi
import tencentcloud_iac_pulumi as tc

from tessera.model.cluster import ClusterConfig
from tessera.model.stack import StackConfig
from tessera.model.labels_taints import AnyPool
from tessera_pulumi.tke.network import NetworkSpec, SubnetSpec, TkeNetwork
from tessera_pulumi.tke.node_pool import (
    SYSTEM_POOL_NAME,
    TkeNodePool,
    NodeNetworkSettings,
    PoolPlacement,
    _build_node_pool_args,
    _build_system_pool_args,
)

# Provider outputs that carry credentials; Pulumi encrypts them in the state.
SECRET_OUTPUTS: Final = ["kubeConfig", "kubeConfigIntranet", "password", "certificationAuthority"]


def _build_tags(cluster: ClusterConfig) -> dict[str, str]:
    return {"tessera-cluster": cluster.name, "managed-by": "pulumi-tessera"}


def _build_network_spec(cluster: ClusterConfig) -> NetworkSpec:
    if cluster.vpc_cidr is None:
        raise ValueError("cluster.vpcCidr is required for provider tke")  # StackConfig validation guarantees it
    return NetworkSpec(
        name=cluster.name,
        vpc_cidr=cluster.vpc_cidr,
        pod_cidr=cluster.pod_cidr,
        subnets=tuple(SubnetSpec(s.zone, s.cidr) for s in cluster.subnets),
        endpoint_public=cluster.endpoint.public,
        allowed_cidrs=tuple(cluster.endpoint.allowed_cidrs),
        tags=tuple(sorted(_build_tags(cluster).items())),
    )


def _max_services(service_cidr: str) -> int:
    """GlobalRouter networking carves services out of the pod CIDR; serviceCidr's size sets how many."""
    return int(ipaddress.IPv4Network(service_cidr).num_addresses)


def _build_cluster_args(cluster: ClusterConfig, vpc_id: pulumi.Input[str]) -> tc.kubernetes.ClusterArgs:
    return tc.kubernetes.ClusterArgs(
        vpc_id=vpc_id,
        cluster_name=cluster.name,
        cluster_desc="Tessera GPU cluster (managed by Pulumi)",
        cluster_version=cluster.kubernetes_version,
        cluster_deploy_type="MANAGED_CLUSTER",
        cluster_level=cluster.level,
        # pools scale out; let TKE raise the managed control plane's level instead of refusing nodes
        auto_upgrade_cluster_level=True,
        network_type="GR",
        cluster_cidr=cluster.pod_cidr,
        cluster_max_pod_num=cluster.max_pods_per_node,
        cluster_max_service_num=_max_services(cluster.service_cidr),
        cluster_os=cluster.node_os,
        container_runtime="containerd",
        deletion_protection=cluster.deletion_protection,
        # endpoints are opened by ClusterEndpoint only (the provider says not to use both)
        cluster_internet=False,
        cluster_intranet=False,
        instance_delete_mode="terminate",
        tags=_build_tags(cluster),
    )


def _build_endpoint_args(
    cluster: ClusterConfig,
    cluster_id: pulumi.Input[str],
    intranet_subnet_id: pulumi.Input[str],
    endpoint_security_group_id: pulumi.Input[str] | None,
) -> tc.kubernetes.ClusterEndpointArgs:
    """Intranet endpoint always (in-VPC tooling); public endpoint only behind the allowedCidrs security group."""
    public = cluster.endpoint.public
    return tc.kubernetes.ClusterEndpointArgs(
        cluster_id=cluster_id,
        cluster_intranet=True,
        cluster_intranet_subnet_id=intranet_subnet_id,
        cluster_internet=public,
        cluster_internet_security_group=endpoint_security_group_id if public else None,
    )


class TkeCluster(pulumi.ComponentResource):
    """VPC, managed TKE cluster, system + GPU node pools and the API endpoint of one stack."""

    cluster_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    node_pools: list[TkeNodePool]
    pool_names: list[str]

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None,
                 network_settings: NodeNetworkSettings = NodeNetworkSettings()) -> None:
        super().__init__("tessera:index:TkeCluster", name, None, opts)
        cluster_cfg = config.cluster
        spec = _build_network_spec(cluster_cfg)
        network = TkeNetwork(f"{name}-network", spec, opts=pulumi.ResourceOptions(parent=self))

        cluster = tc.kubernetes.Cluster(
            name,
            _build_cluster_args(cluster_cfg, network.vpc_id),
            opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=SECRET_OUTPUTS),
        )
        self.cluster_id = cluster.id

        placement = PoolPlacement(
            cluster_id=cluster.id,
            vpc_id=network.vpc_id,
            subnet_ids_by_zone=network.subnet_ids_by_zone,
            security_group_ids=[network.node_security_group_id],
            node_os=cluster_cfg.node_os,
            tags=_build_tags(cluster_cfg),
        )
        system = TkeNodePool(
            f"{name}-{SYSTEM_POOL_NAME}",
            _build_system_pool_args(cluster_cfg, placement, network_settings),
            opts=pulumi.ResourceOptions(parent=self),
        )
        pools: list[AnyPool] = list(config.node_pools)
        self.node_pools = [
            TkeNodePool(f"{name}-{pool.name}", _build_node_pool_args(pool, placement, network_settings), opts=pulumi.ResourceOptions(parent=self))
            for pool in pools
        ]
        self.pool_names = [pool.name for pool in pools]

        endpoint = tc.kubernetes.ClusterEndpoint(
            f"{name}-endpoint",
            _build_endpoint_args(cluster_cfg, cluster.id, network.subnet_ids[0], network.endpoint_security_group_id),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[system, *self.node_pools],
                additional_secret_outputs=SECRET_OUTPUTS,
            ),
        )
        raw = endpoint.kube_config if cluster_cfg.endpoint.public else endpoint.kube_config_intranet
        self.kubeconfig = pulumi.Output.secret(raw)
        self.register_outputs({"clusterId": self.cluster_id, "kubeconfig": self.kubeconfig, "poolNames": self.pool_names})
