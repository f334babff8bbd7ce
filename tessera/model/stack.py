"""StackConfig: everything a platform engineer sets in one stack file, validated as a whole."""
from __future__ import annotations

from pydantic import Field, model_validator

from tessera.model.base import ConfigModel
from tessera.model.cluster import ClusterConfig
from tessera.model.platform import (
    GpuOperatorConfig,
    ImagesConfig,
    MonitoringConfig,
    NamespaceQuota,
    SchedulerConfig,
    WebhookConfig,
)
from tessera.model.pools import NodePool, PoolBase
from tessera.model.problems import SemanticErrors
from tessera.model.rules import check_stack
from tessera.model.values import DnsLabel
from tessera.model.workloads import Workload
from tessera.model.contract import PoolKind


class StackConfig(ConfigModel):
    """One environment. Keys live under the `tessera:` namespace of the Pulumi stack file; `region` is `tencentcloud:region`."""

    region: str | None = Field(default=None, description="tencentcloud:region, e.g. ap-guangzhou. Required for provider tke.")
    cluster: ClusterConfig = Field(description="The Kubernetes cluster (tke or existing).")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig, description="tessera-scheduler and its extender.")
    node_pools: list[NodePool] = Field(min_length=1, description="GPU node pools (at least one).")
    images: ImagesConfig = Field(default_factory=ImagesConfig, description="Images Tessera deploys.")
    gpu_operator: GpuOperatorConfig = Field(default_factory=GpuOperatorConfig, description="NVIDIA GPU operator.")
    quotas: list[NamespaceQuota] = Field(default_factory=list, description="GPU ResourceQuotas per namespace.")
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig, description="Metrics.")
    webhook: WebhookConfig = Field(default_factory=WebhookConfig, description="Mutating admission webhook.")
    namespace: DnsLabel = Field(default="tessera-system", description="Namespace of Tessera's in-cluster components.")
    workloads: list[Workload] = Field(default_factory=list, description="Inference services on GPU shares: Deployment, Service, HPA on a custom metric, prometheus-adapter rule (docs/workloads.md).")

    @model_validator(mode="after")
    def _check_semantics(self) -> StackConfig:
        problems = check_stack(self, is_stack_key)
        if problems:
            raise SemanticErrors(problems)
        return self

    def pool(self, name: str) -> PoolBase:
        """The pool called ``name``; KeyError when there is none."""
        for pool in self.node_pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    def pools_of_kind(self, kind: PoolKind) -> list[PoolBase]:
        return [p for p in self.node_pools if p.kind == kind]

    def kube_scheduler_image(self) -> str:
        """The kube-scheduler image reference; tag defaults to v<cluster.kubernetesVersion>."""
        version = self.cluster.kubernetes_version
        return self.images.kube_scheduler.ref(default_tag=f"v{version}" if version else None)

    def tessera_image(self) -> str:
        return self.images.tessera.ref()


def is_stack_key(key: str) -> bool:
    """Whether ``key`` (without the tessera: prefix) is one of StackConfig's own keys."""
    return any(key in (name, info.alias) for name, info in StackConfig.model_fields.items())
