"""TKE node pools: one `tc.kubernetes.NodePool` per GPU pool of the stack, plus the system pool.

`_build_*` functions compute the provider's typed `*Args` from the validated config (pure, tested
directly); the component only creates the resource. Using the typed classes for every nested input
means a misspelt keyword is a TypeError when the program runs, not a silently ignored dict key.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import pulumi
import tencentcloud_iac_pulumi as tc

from tessera.model.catalog import CudnnPackage, GpuPackage
from tessera.model.cluster import ClusterConfig
from tessera.model.pools import MigPool, PoolBase
from tessera.model.labels_taints import AnyPool, TaintSpec, pool_labels, pool_taints

SYSTEM_POOL_NAME: Final = "system"


@dataclass(frozen=True)
class NodeNetworkSettings:
    """How nodes reach the internet. TKE node pools have no NAT gateway of their own."""

    public_egress: bool = True
    """Default True: nodes get a pay-by-traffic public IP for egress (images from nvcr.io/ghcr.io,
    driver downloads); inbound traffic is still limited by the node security group to the VPC."""
    bandwidth_out_mbps: int = 100
    """Default 100 Mbit/s: GPU images are several GB; billed by traffic, so the cap costs nothing idle."""


@dataclass(frozen=True)
class PoolPlacement:
    """Where a pool's nodes go: the cluster and network ids (provider outputs) it attaches to."""

    cluster_id: pulumi.Input[str]
    vpc_id: pulumi.Input[str]
    subnet_ids_by_zone: Mapping[str, pulumi.Input[str]]
    security_group_ids: Sequence[pulumi.Input[str]]
    node_os: str
    tags: Mapping[str, str]


def _select_subnets(zones: Sequence[str], subnet_ids_by_zone: Mapping[str, pulumi.Input[str]]) -> list[pulumi.Input[str]]:
    """The subnets of the pool's zones (all subnets when the pool names none), in config order."""
    if not zones:
        return list(subnet_ids_by_zone.values())
    return [subnet_ids_by_zone[z] for z in zones]


def _package(package: GpuPackage) -> dict[str, str]:
    return {"version": package.version, "name": package.name}


def _cudnn(package: CudnnPackage) -> dict[str, str]:
    out = _package(GpuPackage(package.version, package.name))
    if package.doc_name is not None:
        out["doc_name"] = package.doc_name
    if package.dev_name is not None:
        out["dev_name"] = package.dev_name
    return out


def _build_gpu_args(pool: PoolBase) -> tc.kubernetes.NodePoolNodeConfigGpuArgsArgs:
    """Driver/CUDA/cuDNN for TKE to install, as one catalog record (the pool's gpuDriver, else the
    default for its GPU), and MIG mode.

    TKE takes each package as {version, name}; cuDNN also as {doc_name, dev_name} when it comes as
    Debian packages. The names are the installer files of the record, never built from versions.
    """
    software = pool.gpu_software()
    mig = isinstance(pool, MigPool)
    if pool.gpu_driver.custom_driver_url:
        return tc.kubernetes.NodePoolNodeConfigGpuArgsArgs(
            custom_driver={"address": pool.gpu_driver.custom_driver_url},
            cuda=_package(software.cuda),
            cudnn=_cudnn(software.cudnn),
            mig_enable=mig,
        )
    return tc.kubernetes.NodePoolNodeConfigGpuArgsArgs(
        driver=_package(software.driver), cuda=_package(software.cuda), cudnn=_cudnn(software.cudnn), mig_enable=mig
    )


def _build_taint_args(taints: Sequence[TaintSpec]) -> list[tc.kubernetes.NodePoolTaintArgs]:
    return [tc.kubernetes.NodePoolTaintArgs(key=t.key, value=t.value, effect=t.effect) for t in taints]


def _build_auto_scaling_config(
    instance_type: str, disk_type: str, disk_gb: int, placement: PoolPlacement, network: NodeNetworkSettings
) -> tc.kubernetes.NodePoolAutoScalingConfigArgs:
    return tc.kubernetes.NodePoolAutoScalingConfigArgs(
        instance_type=instance_type,
        system_disk_type=disk_type,
        system_disk_size=disk_gb,
        orderly_security_group_ids=list(placement.security_group_ids),
        instance_charge_type="POSTPAID_BY_HOUR",
        public_ip_assigned=network.public_egress,
        internet_charge_type="TRAFFIC_POSTPAID_BY_HOUR" if network.public_egress else None,
        internet_max_bandwidth_out=network.bandwidth_out_mbps if network.public_egress else None,
        enhanced_monitor_service=True,
        enhanced_security_service=True,
    )


def _build_node_pool_args(pool: AnyPool, placement: PoolPlacement, network: NodeNetworkSettings = NodeNetworkSettings()) -> tc.kubernetes.NodePoolArgs:
    """Everything TKE needs for one GPU pool."""
    return tc.kubernetes.NodePoolArgs(
        cluster_id=placement.cluster_id,
        vpc_id=placement.vpc_id,
        subnet_ids=_select_subnets(pool.zones, placement.subnet_ids_by_zone),
        name=pool.name,
        min_size=pool.min_size,
        max_size=pool.max_size,
        desired_capacity=pool.desired,
        # autoscaling only when there is room to scale; otherwise TKE keeps desired_capacity exactly
        enable_auto_scale=pool.max_size > pool.min_size,
        # GPU CVMs are expensive: deleting the pool deletes its instances (the provider keeps them by default)
        delete_keep_instance=False,
        # GPU stock runs out; keep retrying with back-off instead of failing the scale-out
        retry_policy="INCREMENTAL_INTERVALS",
        multi_zone_subnet_policy="PRIORITY",
        node_os=placement.node_os,
        labels=pool_labels(pool),
        taints=_build_taint_args(pool_taints(pool)),
        auto_scaling_config=_build_auto_scaling_config(
            pool.instance_type or "", pool.system_disk.type, pool.system_disk.size_gb, placement, network
        ),
        node_config=tc.kubernetes.NodePoolNodeConfigArgs(gpu_args=_build_gpu_args(pool), is_schedule=True),
        tags={**placement.tags, "tessera-pool": pool.name},
    )


def _build_system_pool_args(cluster: ClusterConfig, placement: PoolPlacement, network: NodeNetworkSettings = NodeNetworkSettings()) -> tc.kubernetes.NodePoolArgs:
    """Untainted CPU nodes for CoreDNS, the GPU operator's controller and Tessera's control plane."""
    nodes = cluster.system_nodes
    return tc.kubernetes.NodePoolArgs(
        cluster_id=placement.cluster_id,
        vpc_id=placement.vpc_id,
        subnet_ids=_select_subnets((), placement.subnet_ids_by_zone),
        name=SYSTEM_POOL_NAME,
        min_size=nodes.count,
        max_size=nodes.count,
        desired_capacity=nodes.count,
        enable_auto_scale=False,
        delete_keep_instance=False,
        retry_policy="INCREMENTAL_INTERVALS",
        multi_zone_subnet_policy="EQUALITY",  # spread system nodes over zones
        node_os=placement.node_os,
        auto_scaling_config=_build_auto_scaling_config(nodes.instance_type, "CLOUD_PREMIUM", nodes.system_disk_gb, placement, network),
        node_config=tc.kubernetes.NodePoolNodeConfigArgs(is_schedule=True),
        tags={**placement.tags, "tessera-pool": SYSTEM_POOL_NAME},
    )


def _ignored_changes(args: tc.kubernetes.NodePoolArgs) -> list[str]:
    """With autoscaling on, the cluster autoscaler owns the node count: a later `pulumi up` must not
    reset it to desiredSize (desiredSize only seeds a new pool)."""
    return ["desiredCapacity"] if args.enable_auto_scale else []


class TkeNodePool(pulumi.ComponentResource):
    """One pool of the stack (a GPU pool, or the system pool) as a TKE node pool."""

    node_pool_id: pulumi.Output[str]

    def __init__(self, name: str, args: tc.kubernetes.NodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tessera:index:TkeNodePool", name, None, opts)
        node_pool = tc.kubernetes.NodePool(name, args, opts=pulumi.ResourceOptions(parent=self, ignore_changes=_ignored_changes(args)))
        self.node_pool_id = node_pool.id
        self.register_outputs({"nodePoolId": self.node_pool_id})
