"""Where Tessera runs: a TKE cluster it creates, or an existing cluster reached through a kubeconfig."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from tessera.model.base import ConfigModel
from tessera.model.catalog.kubernetes import DraFeature
from tessera.model.values import Cidr, EnvVarName, KubernetesVersion, PulumiKey

Provider = Literal["tke", "existing"]
ClusterLevel = Literal["L5", "L20", "L50", "L100", "L200", "L500", "L1000", "L3000", "L5000"]


class Subnet(ConfigModel):
    """One VPC subnet; node pools place nodes in these zones."""

    zone: str = Field(description="Availability zone, e.g. ap-guangzhou-3 (must be in tencentcloud:region).")
    cidr: Cidr = Field(description="Subnet CIDR, inside cluster.vpcCidr and not overlapping other subnets.")


class Endpoint(ConfigModel):
    """The Kubernetes API endpoint of a TKE cluster."""

    public: bool = Field(default=False, description="Open a public (internet) API endpoint.")
    allowed_cidrs: list[Cidr] = Field(default_factory=list, description="Source CIDRs allowed to reach the public endpoint; required when public is true; 0.0.0.0/0 is refused.")


class KubeconfigSource(ConfigModel):
    """Where the kubeconfig of an existing cluster comes from. Set exactly one key.

    Credentials never sit in the stack file in clear: use a file path, an environment variable, or a
    Pulumi secret (`pulumi config set --secret tessera:<name> "$(cat kubeconfig)"`).
    """

    path: str | None = Field(default=None, description="Path of a kubeconfig file; ~ is expanded, e.g. ~/.kube/config.")
    env: EnvVarName | None = Field(default=None, description="Environment variable holding the path of a kubeconfig file, e.g. KUBECONFIG.")
    secret: PulumiKey | None = Field(default=None, description="Name of a Pulumi secret config key (without the tessera: prefix) holding the kubeconfig text.")


class SystemNodes(ConfigModel):
    """Non-GPU nodes for cluster add-ons and Tessera's control plane (GPU nodes are tainted)."""

    instance_type: str = Field(default="SA2.LARGE8", description="CVM instance type of system nodes.")
    count: int = Field(default=2, ge=1, le=50, description="Number of system nodes; 2 keeps the scheduler and webhook available during node maintenance.")
    system_disk_gb: int = Field(default=50, ge=50, le=1024, description="System disk size in GB.")


class ClusterConfig(ConfigModel):
    """The Kubernetes cluster. provider tke creates it on Tencent Cloud; existing uses one you have."""

    provider: Provider = Field(description="tke: create a TKE cluster; existing: deploy onto a cluster reached by kubeconfig.")
    name: str = Field(min_length=1, max_length=50, description="Cluster name (TKE) or a label for the existing cluster.")
    kubernetes_version: KubernetesVersion | None = Field(default=None, description="Kubernetes version, e.g. \"1.30.0\". Required for tke; for existing, the running version (sets the kube-scheduler image tag).")
    vpc_cidr: Cidr | None = Field(default=None, description="tke: CIDR of the VPC created for the cluster.")
    subnets: list[Subnet] = Field(default_factory=list, description="tke: subnets (one per zone) inside vpcCidr.")
    endpoint: Endpoint = Field(default_factory=Endpoint, description="tke: API endpoint exposure.")
    pod_cidr: Cidr = Field(default="172.16.0.0/16", description="tke: pod (cluster) CIDR; must not overlap the VPC or serviceCidr.")
    service_cidr: Cidr = Field(default="172.17.0.0/20", description="tke: service CIDR; must not overlap the VPC or podCidr.")
    max_pods_per_node: Literal[16, 32, 64, 128, 256] = Field(default=64, description="tke: pod IPs reserved per node.")
    level: ClusterLevel = Field(default="L20", description="tke: managed cluster size level (L20 = up to 20 nodes); must cover every pool at maxSize plus system nodes.")
    node_os: str = Field(default="tlinux3.1x86_64", description="tke: node OS image name (TencentOS Server 3.1 has TKE GPU driver support).")
    deletion_protection: bool = Field(default=False, description="tke: refuse to delete the cluster until this is switched off.")
    system_nodes: SystemNodes = Field(default_factory=SystemNodes, description="tke: non-GPU nodes for add-ons and Tessera's control plane.")
    kubeconfig: KubeconfigSource | None = Field(default=None, description="existing: where the kubeconfig comes from (required).")
    context: str | None = Field(default=None, description="existing: kubeconfig context; default the current context.")
    feature_gates: dict[DraFeature, bool] = Field(default_factory=dict, description="existing: DRA feature gates your cluster's API server, kube-scheduler and kubelets run with, where they differ from the version's defaults (e.g. {DRAConsumableCapacity: true} on 1.34); Tessera reads them only to check what a pool with allocation: dra may use. TKE clusters run the defaults.")

    @property
    def is_existing(self) -> bool:
        return self.provider == "existing"


# Fields only a TKE cluster uses; setting them on an existing cluster is a mistake worth reporting.
TKE_ONLY_FIELDS: tuple[str, ...] = (
    "vpc_cidr", "subnets", "endpoint", "pod_cidr", "service_cidr", "max_pods_per_node", "level", "node_os",
    "deletion_protection", "system_nodes",
)
EXISTING_ONLY_FIELDS: tuple[str, ...] = ("kubeconfig", "context", "feature_gates")
