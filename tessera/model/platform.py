"""In-cluster settings: scheduler, images, NVIDIA GPU operator, quotas, monitoring, webhook."""
from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from tessera.model.base import ConfigModel
from tessera.model.leader_election import (
    DEFAULT_LEASE_DURATION_S,
    DEFAULT_RENEW_DEADLINE_S,
    DEFAULT_RETRY_PERIOD_S,
    LeaderElectionTiming,
)
from tessera.model.monitoring import (  # noqa: F401 - re-exported: the section's home before it grew
    DEFAULT_PROMETHEUS_ADAPTER_CHART_VERSION,
    DEFAULT_PROMETHEUS_URL,
    MonitoringConfig,
)
from tessera.model.values import DnsLabel, ImageDigest, ImageRepository, ImageTag, Version
from tessera.model.contract import EXTENDER_LEASE, GPU_CORE, GPU_MEMORY, NVIDIA_GPU, NodePlacement

LogLevel = Literal["debug", "info", "warning", "error"]
PullPolicy = Literal["IfNotPresent", "Always", "Never"]
FailurePolicy = Literal["Fail", "Ignore"]

DEFAULT_TESSERA_REPOSITORY = "ghcr.io/tessera-gpu/tessera"
DEFAULT_TESSERA_TAG = "0.1.0"
DEFAULT_KUBE_SCHEDULER_REPOSITORY = "registry.k8s.io/kube-scheduler"


# Longest accepted lease timing: a crashed leader's binds stop for up to the lease duration, and
# kube-scheduler's own default (15 s) must still be expressible.
MAX_LEADER_ELECTION_SECONDS: Final = 60.0


class LeaderElectionConfig(ConfigModel):
    """Leader election of the extender replicas (one Lease in Tessera's namespace). Rendered as kube-scheduler's `--leader-elect-*` flags and checked by client-go's rules: the lease outlasts the renew deadline, and the renew deadline leaves the leader more than one jittered retry period to renew."""

    lease_duration_seconds: float = Field(
        default=DEFAULT_LEASE_DURATION_S, ge=0.001, le=MAX_LEADER_ELECTION_SECONDS,
        description="A standby takes the Lease over when the leader has not renewed it for this long (measured on the standby's own clock), so after a leader crashes binding pauses for up to this long plus one retry period.",
    )
    renew_deadline_seconds: float = Field(
        default=DEFAULT_RENEW_DEADLINE_S, ge=0.001, le=MAX_LEADER_ELECTION_SECONDS,
        description="The leader stops binding when it could not renew the Lease for this long; shorter than the lease duration, so it has stopped before a standby may take over.",
    )
    retry_period_seconds: float = Field(
        default=DEFAULT_RETRY_PERIOD_S, ge=0.001, le=MAX_LEADER_ELECTION_SECONDS,
        description="How often the leader renews the Lease and standbys try to acquire it; after a planned handover (SIGTERM) a standby takes over within about this long.",
    )

    def timing(self) -> LeaderElectionTiming:
        """The same timing as the runtime reads it (rules and defaults in `tessera.model.leader_election`)."""
        return LeaderElectionTiming(self.lease_duration_seconds, self.renew_deadline_seconds, self.retry_period_seconds)


class ExtenderConfig(ConfigModel):
    """The scheduler extender (`tessera scheduler serve`): replicas and their leader election."""

    replicas: int = Field(
        default=2, ge=1, le=5,
        description=f"Extender replicas: 2 or more for availability; 1 stops shared-GPU scheduling during every restart. The holder of the Lease {EXTENDER_LEASE} is the only one that binds; the others keep their cache warm from the watch and forward kube-scheduler's calls to it.",
    )
    leader_election: LeaderElectionConfig = Field(default_factory=LeaderElectionConfig, description="Lease timing of the extender replicas.")


class SchedulerConfig(ConfigModel):
    """The tessera-scheduler (official kube-scheduler image + Tessera's extender) for shared pools."""

    placement: NodePlacement = Field(default="fragmentation-aware", description="Node choice: binpack fills nodes, spread balances them, fragmentation-aware leaves the fewest stranded GPU fractions.")
    replicas: int = Field(default=2, ge=1, le=5, description="Replicas of tessera-scheduler, the second kube-scheduler (one leader, Lease tessera-scheduler). Not the extender's: that is scheduler.extender.replicas.")
    extender: ExtenderConfig = Field(default_factory=ExtenderConfig, description="The scheduler extender's replicas and leader election.")
    weight: int = Field(default=5, ge=1, le=100, description="Weight of the extender's prioritize score in kube-scheduler.")
    http_timeout_seconds: float = Field(default=5.0, gt=0, le=60, description="kube-scheduler's timeout for each extender call.")
    log_level: LogLevel = Field(default="info", description="Extender log level.")


class ImageRef(ConfigModel):
    """A container image: repository plus tag and/or digest (digest wins when both are set)."""

    repository: ImageRepository = Field(description="Image repository without tag or digest.")
    tag: ImageTag | None = Field(default=None, description="Image tag.")
    digest: ImageDigest | None = Field(default=None, description="Image digest (sha256:...) as the registry reports it; pins the exact image. Written by the release workflow (`tessera images pin`); placeholder-looking digests (repeated or patterned hex) are refused.")

    def ref(self, default_tag: str | None = None) -> str:
        """repository[:tag][@digest], using ``default_tag`` when no tag is set."""
        tag = self.tag or default_tag
        text = self.repository + (f":{tag}" if tag else "")
        return text + (f"@{self.digest}" if self.digest else "")


class ImagesConfig(ConfigModel):
    """Images Tessera deploys."""

    tessera: ImageRef = Field(
        default_factory=lambda: ImageRef(repository=DEFAULT_TESSERA_REPOSITORY, tag=DEFAULT_TESSERA_TAG),
        description=f"The Tessera image (extender, webhook, device plugin, node agent). Default {DEFAULT_TESSERA_REPOSITORY}:{DEFAULT_TESSERA_TAG}.",
    )
    kube_scheduler: ImageRef = Field(
        default_factory=lambda: ImageRef(repository=DEFAULT_KUBE_SCHEDULER_REPOSITORY),
        description=f"The kube-scheduler image run as tessera-scheduler. Default {DEFAULT_KUBE_SCHEDULER_REPOSITORY} with tag v<cluster.kubernetesVersion>.",
    )
    require_digests: bool = Field(default=False, description="Refuse images without a digest, here and in the policy pack (`tessera images policy-config`). The release workflow turns it on when it pins a stack's images; leave it off until a release has published digests.")
    pull_policy: PullPolicy = Field(default="IfNotPresent", description="imagePullPolicy of Tessera's pods.")
    pull_secrets: list[DnsLabel] = Field(default_factory=list, description="Names of image pull Secrets in Tessera's namespace.")


class GpuOperatorConfig(ConfigModel):
    """NVIDIA GPU operator (Helm chart): device plugin, mig-manager, dcgm-exporter for nvidia/mig/timeslice pools."""

    enabled: bool = Field(default=True, description="Install the GPU operator; required when the stack has nvidia, mig or timeslice pools.")
    chart_version: Version = Field(default="v24.9.2", description="gpu-operator Helm chart version.")
    chart_repository: str = Field(default="https://helm.ngc.nvidia.com/nvidia", description="Helm repository URL of the chart.")
    namespace: DnsLabel = Field(default="gpu-operator", description="Namespace of the operator.")
    install_driver: bool = Field(default=False, description="Let the operator install drivers; off on TKE, which installs them through the node pool's gpu_args.")
    install_toolkit: bool = Field(default=True, description="Let the operator install the NVIDIA container toolkit.")


class NamespaceQuota(ConfigModel):
    """A ResourceQuota on GPU resources in one namespace (seed 003 practice)."""

    namespace: DnsLabel = Field(description="Namespace the quota applies to.")
    gpu_core: int | None = Field(default=None, ge=0, description=f"Most {GPU_CORE} the namespace may request (100 = one GPU).")
    gpu_memory_mib: int | None = Field(default=None, ge=0, alias="gpuMemoryMiB", description=f"Most {GPU_MEMORY} (MiB) the namespace may request.")
    nvidia_gpu: int | None = Field(default=None, ge=0, description=f"Most {NVIDIA_GPU} (whole GPUs, or time-sliced replicas) the namespace may request.")
    resources: dict[str, int] = Field(default_factory=dict, description="Other extended resources, e.g. nvidia.com/mig-1g.5gb: 4.")

    def hard(self) -> dict[str, str]:
        """The ResourceQuota ``spec.hard`` (extended resources can only be quota'd on requests)."""
        limits: dict[str, int] = dict(self.resources)
        for name, value in ((GPU_CORE, self.gpu_core), (GPU_MEMORY, self.gpu_memory_mib), (NVIDIA_GPU, self.nvidia_gpu)):
            if value is not None:
                limits[name] = value
        return {f"requests.{name}": str(value) for name, value in sorted(limits.items())}


class WebhookConfig(ConfigModel):
    """Tessera's mutating admission webhook (scheduler name, qGPU aliases, allocation env)."""

    replicas: int = Field(default=2, ge=1, le=5, description="Webhook replicas.")
    failure_policy: FailurePolicy = Field(default="Fail", description="Fail: GPU pods are rejected while the webhook is down; Ignore: they are admitted unmutated.")
    timeout_seconds: int = Field(default=5, ge=1, le=30, description="API server's timeout for a webhook call.")
