"""What the package offers: its name and, per component, which part of the stack config it takes.

Shared by the generator of the typed inputs (`codegen`) and the components that read them
(`inputs`, `components`), so that the two cannot disagree on a component's shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tessera.model.cluster import EXISTING_ONLY_FIELDS, TKE_ONLY_FIELDS, Provider

PACKAGE_NAME: Final = "tessera"
# The one input that is not a stack config key: the secret values the config names by key.
SECRETS_FIELD: Final = "secrets"
SECRETS_DESCRIPTION: Final = (
    "Secret values the settings above name by key, e.g. the key given in cluster.kubeconfig.secret: "
    "key (without the tessera: prefix) -> value. Pass them as Pulumi secrets (pulumi.secret, fn::secret); "
    "they stay secrets in the state. The stack-file route reads the same keys from `pulumi config set --secret tessera:<key>`."
)

@dataclass(frozen=True)
class ComponentSpec:
    """One component of the package: the stack config with `cluster.provider` fixed."""

    name: str
    provider: Provider
    description: str
    stack_fields_left_out: tuple[str, ...]
    """StackConfig fields (Python names) the component does not take."""
    cluster_type: str
    cluster_description: str
    cluster_fields_left_out: tuple[str, ...]
    """ClusterConfig fields (Python names) the component does not take; `provider` is always fixed."""

    @property
    def args_type(self) -> str:
        return f"{self.name}Args"

    @property
    def type_token(self) -> str:
        return f"{PACKAGE_NAME}:index:{self.name}"


TKE_GPU_CLUSTER: Final = ComponentSpec(
    name="TkeGpuCluster",
    provider="tke",
    description=(
        "A Tencent Cloud TKE cluster with Tessera's GPU node pools (nvidia, shared, mig, timeslice) and its in-cluster "
        "platform: the resources the stack-file program declares for a stack with cluster.provider tke."
    ),
    stack_fields_left_out=(),
    cluster_type="TkeClusterConfig",
    cluster_description="The TKE cluster Tessera creates: network, managed control plane, system nodes, API endpoint.",
    cluster_fields_left_out=("provider", *EXISTING_ONLY_FIELDS),
)

EXISTING_CLUSTER_PLATFORM: Final = ComponentSpec(
    name="ExistingClusterPlatform",
    provider="existing",
    description=(
        "Tessera's in-cluster platform (scheduler extender, device plugin, node agent, webhook, GPU operator) on a cluster "
        "you already run, reached through its kubeconfig: the resources the stack-file program declares for a stack "
        "with cluster.provider existing."
    ),
    stack_fields_left_out=("region",),
    cluster_type="ExistingClusterConfig",
    cluster_description="The existing cluster: a name for it, its Kubernetes version and where its kubeconfig comes from.",
    cluster_fields_left_out=("provider", *TKE_ONLY_FIELDS),
)

COMPONENT_SPECS: Final = (TKE_GPU_CLUSTER, EXISTING_CLUSTER_PLATFORM)
