"""`TesseraStack`: the one top-level component `__main__.py` creates.

cluster (TKE: network, cluster, node pools, endpoint | existing: kubeconfig only)
  -> Kubernetes provider from the kubeconfig
  -> existing clusters: the pools' labels and taints on their nodes (node patches)
  -> in-cluster platform (tessera_pulumi.platform.TesseraPlatform), after the node pools exist.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as k8s

from tessera.model.membership import Membership
from tessera.model.plan import plan_stack
from tessera.model.stack import StackConfig
from tessera_pulumi.existing import ExistingCluster
from tessera_pulumi.node_patches import PoolNodePatches
from tessera_pulumi.platform import TesseraPlatform
from tessera_pulumi.tke.cluster import TkeCluster


class PlatformFactory(Protocol):
    """The constructor of the in-cluster platform component (`TesseraPlatform`; tests pass a stand-in)."""

    def __call__(
        self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None, secrets: Mapping[str, Any] | None = None
    ) -> pulumi.ComponentResource: ...


class TesseraStack(pulumi.ComponentResource):
    """Cluster + node pools + Kubernetes provider + in-cluster platform for one environment."""

    cluster_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    pool_names: list[str]
    plan: dict[str, Any]
    k8s_provider: k8s.Provider
    platform: pulumi.ComponentResource

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None,
                 platform: PlatformFactory | None = None, secrets: Mapping[str, Any] | None = None,
                 membership: Membership | pulumi.Output[Membership] | None = None) -> None:
        """`membership`: on an existing cluster, which nodes join which pool (listed at preview by
        `program.py`); None declares no node patch (the patches are retained, so none is undone)."""
        super().__init__("tessera:index:TesseraStack", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster: TkeCluster | ExistingCluster
        context: str | None = None
        if config.cluster.provider == "tke":
            cluster = TkeCluster(f"{name}-cluster", config, opts=child)
        else:
            cluster = ExistingCluster(f"{name}-cluster", config, opts=child, secrets=secrets)
            context = cluster.context
        self.cluster_id = cluster.cluster_id
        self.kubeconfig = cluster.kubeconfig
        self.pool_names = cluster.pool_names
        self.plan = plan_stack(config).to_json()  # the same document as `tessera plan --json`

        self.k8s_provider = k8s.Provider(
            f"{name}-k8s",
            k8s.ProviderArgs(kubeconfig=cluster.kubeconfig, context=context),
            opts=pulumi.ResourceOptions(parent=self),
        )

        node_setup: list[pulumi.Input[pulumi.Resource]] = list(cluster.node_pools)
        self.node_patches: PoolNodePatches | pulumi.Output[PoolNodePatches] | None = None
        if config.cluster.is_existing and membership is not None:
            patch_opts = pulumi.ResourceOptions(provider=self.k8s_provider, parent=self)
            if isinstance(membership, pulumi.Output):  # listed with a kubeconfig that is an output (membership.py)
                self.node_patches = membership.apply(lambda known: PoolNodePatches(f"{name}-nodes", config.node_pools, known, opts=patch_opts))
            else:
                self.node_patches = PoolNodePatches(f"{name}-nodes", config.node_pools, membership, opts=patch_opts)
            node_setup.append(self.node_patches)

        factory: PlatformFactory = platform if platform is not None else TesseraPlatform
        self.platform = factory(
            f"{name}-platform",
            config,
            opts=pulumi.ResourceOptions(provider=self.k8s_provider, parent=self, depends_on=node_setup),
            secrets=secrets,
        )
        self.register_outputs({"clusterId": self.cluster_id, "kubeconfig": self.kubeconfig, "poolNames": self.pool_names, "plan": self.plan})
