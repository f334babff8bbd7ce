"""GPU node pools: the four kinds (nvidia, shared, mig, timeslice) as a discriminated union on ``kind``."""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Literal

from pydantic import Field

from tessera.model.base import ConfigModel
from tessera.model.catalog import GpuModelSpec, GpuSoftware, default_gpu_software, gpu_model, instance_type, matching_software
from tessera.model.values import CronExpression, DnsLabel, HttpUrl, LabelKey, Labels, MigLayout, RepartitionLayout, Replicas, Version
from tessera.model.contract import GpuPlacement, PoolKind, SharingPolicy
from tessera.model.pool_policy import DEFAULT_POOL_POLICY, MAX_OFFLINE_RESUME_IDLE_S, MAX_SHARES_PER_GPU, MemoryEnforcement, PoolPolicy

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
MigStrategy = Literal["single", "mixed"]
AllocationRoute = Literal["device-plugin", "dra"]
DiskType = Literal["CLOUD_PREMIUM", "CLOUD_SSD", "CLOUD_BSSD", "CLOUD_HSSD", "CLOUD_TSSD"]


class Taint(ConfigModel):
    """An extra taint on every node of the pool (Tessera adds its own GPU taint anyway)."""

    key: LabelKey = Field(description="Taint key.")
    value: str = Field(default="", description="Taint value (may be empty).")
    effect: TaintEffect = Field(default="NoSchedule", description="NoSchedule, PreferNoSchedule or NoExecute.")


class GpuDriverConfig(ConfigModel):
    """GPU software TKE installs on the pool's nodes: one driver/CUDA/cuDNN combination of the catalog.

    Give the versions of the combination you want (any subset); the pool gets the catalog record
    that has them all, with the installer file names TKE takes. Nothing set: the catalog default
    for the GPU. A combination TKE does not offer is refused at preview with the nearest ones.
    """

    driver: Version | None = Field(default=None, description="NVIDIA driver version, e.g. \"535.161.07\". Default: per GPU model from the catalog.")
    cuda: Version | None = Field(default=None, description="CUDA version, e.g. \"12.2.2\". Default: the catalog record's.")
    cudnn: Version | None = Field(default=None, description="cuDNN version, e.g. \"8.9.4\". Default: the catalog record's.")
    custom_driver_url: HttpUrl | None = Field(default=None, description="URL of a custom driver package; TKE installs it instead of a catalog driver (then `driver` must be unset; CUDA and cuDNN still come from the catalog).")

    def chosen(self, model: GpuModelSpec) -> list[GpuSoftware]:
        """Catalog records that fit the versions given and support ``model``, the default first."""
        driver = None if self.custom_driver_url else self.driver
        found = [r for r in matching_software(driver, self.cuda, self.cudnn) if r.supports(model)]
        default = default_gpu_software(model)
        newest_first = sorted(found, key=lambda r: r.driver_key, reverse=True)
        return sorted(newest_first, key=lambda r: r != default)


class SystemDisk(ConfigModel):
    """The system disk of each node."""

    type: DiskType = Field(default="CLOUD_PREMIUM", description="CBS disk type.")
    size_gb: int = Field(default=100, ge=50, le=1024, description="Size in GB; GPU images with CUDA need room, so the default is 100.")


class RepartitionEntry(ConfigModel):
    """One layout of a scheduled re-partitioning (seed 002: e.g. 4 shares per GPU by day, whole GPUs at night).

    From the time ``cron`` fires until the next entry fires, the pool uses ``layout``:
    shared pools: shares per GPU (at most that many containers per GPU, 1 = whole GPUs);
    mig pools: a MIG layout (named, or profile -> count); timeslice pools: time-slicing replicas.
    """

    name: DnsLabel | None = Field(default=None, description="Optional name shown by `tessera plan`, e.g. day or night.")
    cron: CronExpression = Field(description="5-field cron expression (minute hour day-of-month month day-of-week) at which this layout starts.")
    timezone: str = Field(default="UTC", description="IANA time zone the cron expression is read in, e.g. Asia/Shanghai.")
    layout: RepartitionLayout = Field(description="Layout from this time on; its form depends on the pool kind (see above).")


class SharingConfig(ConfigModel):
    """How a shared pool splits each GPU between containers."""

    # The defaults are the pool policy record's, so every component that reads a policy back
    # from the pools file or node labels falls back to what the stack config documents.

    policy: SharingPolicy = Field(default=DEFAULT_POOL_POLICY.sharing, description="Isolation policy: best-effort (work-conserving), fixed-share (compute capped at the request), burst-share (guaranteed request, may use idle compute).")
    placement: GpuPlacement = Field(default=DEFAULT_POOL_POLICY.placement, description="Which GPU of a node a container gets: binpack fills a GPU before the next, spread prefers empty GPUs.")
    online_offline: bool = Field(default=DEFAULT_POOL_POLICY.online_offline, description="Co-locate online and offline pods (annotation tessera.dev/app-class): offline work pauses while online work runs.")
    qgpu_aliases: bool = Field(default=DEFAULT_POOL_POLICY.qgpu_aliases, description="Also accept TKE qGPU resource names (tke.cloud.tencent.com/qgpu-core, qgpu-memory in GiB) on this pool.")
    memory_enforcement: MemoryEnforcement = Field(default=DEFAULT_POOL_POLICY.memory_enforcement, description="enforce: a container exceeding its tessera.dev/gpu-memory is stopped; warn: only reported.")
    offline_resume_idle_seconds: float = Field(default=DEFAULT_POOL_POLICY.offline_resume_idle_s, gt=0, le=MAX_OFFLINE_RESUME_IDLE_S, description="How long the online work must be idle before paused offline work resumes.")
    shares_per_gpu: int | None = Field(default=DEFAULT_POOL_POLICY.shares_per_gpu, ge=1, le=MAX_SHARES_PER_GPU, description="At most this many containers share one GPU (1 = whole GPUs only). Unset: limited only by 100 gpu-core units per GPU.")

    def pool_policy(self) -> PoolPolicy:
        """The record every component reads back from the pools file and node labels."""
        return PoolPolicy(
            sharing=self.policy,
            placement=self.placement,
            online_offline=self.online_offline,
            qgpu_aliases=self.qgpu_aliases,
            memory_enforcement=self.memory_enforcement,
            offline_resume_idle_s=self.offline_resume_idle_seconds,
            shares_per_gpu=self.shares_per_gpu,
        )


class MigConfig(ConfigModel):
    """MIG partitioning of every GPU in a mig pool (applied by NVIDIA mig-manager via nvidia.com/mig.config)."""

    strategy: MigStrategy = Field(default="mixed", description="single: one profile on all GPUs, advertised as nvidia.com/gpu; mixed: per-profile resources nvidia.com/mig-<profile>.")
    profile: MigLayout = Field(description="A named layout (e.g. all-1g.5gb, all-balanced) or a mapping of MIG profile to count per GPU.")


class TimeSlicingConfig(ConfigModel):
    """NVIDIA device plugin time-slicing: each GPU (or MIG slice) is advertised ``replicas`` times. No isolation."""

    replicas: Replicas = Field(description="Replicas for every shared resource, or a mapping of resource name (nvidia.com/gpu, nvidia.com/mig-<profile>) to replicas; each at least 2.")
    rename_by_default: bool = Field(default=False, description="Advertise shared resources as <name>.shared so pods opt in explicitly.")
    fail_requests_greater_than_one: bool = Field(default=False, description="Reject requests for more than one replica (they would not get more compute).")

    def replicas_for(self, resources: tuple[str, ...]) -> dict[str, int]:
        """Replicas per resource name, expanding a single number to every resource."""
        if isinstance(self.replicas, int):
            return {name: self.replicas for name in resources}
        return dict(self.replicas)


class PoolBase(ConfigModel):
    """Fields every pool kind has."""

    name: DnsLabel = Field(max_length=25, description="Pool name, unique in the stack, at most 25 characters (TKE's node pool name limit; keeps derived label values under 63); nodes get the label tessera.dev/pool=<name>.")
    kind: PoolKind = Field(description="nvidia | shared | mig | timeslice (see the pool kinds table).")
    instance_type: str | None = Field(default=None, description="TKE instance type, e.g. GN7.2XLARGE32. Required on provider tke; not allowed on provider existing.")
    custom_instance_type: bool = Field(default=False, description="Allow an instance type the catalog does not know; then gpuModel and gpuCount are required.")
    gpu_model: str | None = Field(default=None, description="GPU model (catalog name, e.g. T4, A100-40GB). Derived from the instance type when known.")
    gpu_count: int | None = Field(default=None, ge=1, le=16, description="GPUs per node. Derived from the instance type when known; required with customInstanceType and on provider existing.")
    min_size: int = Field(default=0, ge=0, le=2000, description="Fewest nodes (autoscaling lower bound). On provider existing: nodes expected to carry the pool's selector.")
    max_size: int = Field(default=1, ge=0, le=2000, description="Most nodes (autoscaling upper bound).")
    desired_size: int | None = Field(default=None, ge=0, le=2000, description="Nodes to start with; default minSize.")
    labels: Labels = Field(default_factory=dict, description="Extra node labels (Tessera adds tessera.dev/pool, tessera.dev/pool-kind and gputype itself).")
    taints: list[Taint] = Field(default_factory=list, description="Extra node taints (Tessera adds the tessera.dev/gpu taint itself).")
    node_selector: Labels = Field(default_factory=dict, description="Provider existing only: labels you own that select this pool's existing nodes (not labels Tessera sets); `pulumi up` gives those nodes the pool's labels and taints with server-side-apply node patches and removes them when the pool goes.")
    zones: list[str] = Field(default_factory=list, description="Provider tke: zones (of cluster.subnets) to place nodes in; default all.")
    gpu_driver: GpuDriverConfig = Field(default_factory=GpuDriverConfig, description="Driver/CUDA/cuDNN overrides (provider tke).")
    system_disk: SystemDisk = Field(default_factory=SystemDisk, description="System disk of each node (provider tke).")
    repartition: list[RepartitionEntry] = Field(default_factory=list, description="Scheduled layouts (seed 002); empty: the pool keeps its configured layout.")
    allocation: AllocationRoute = Field(default="device-plugin", description="How pods get the pool's GPUs: device-plugin (extended resources through Tessera's scheduler extender and device plugin, or NVIDIA's on nvidia/mig/timeslice pools) or dra (Dynamic Resource Allocation: ResourceClaims against Tessera's DRA driver; shared pools, Kubernetes 1.34 or later; see docs/dra.md).")

    @property
    def desired(self) -> int:
        """Nodes the pool starts with: desiredSize, or minSize when unset."""
        return self.min_size if self.desired_size is None else self.desired_size

    def gpu_spec(self) -> GpuModelSpec:
        """The pool's GPU model from the catalog (valid after StackConfig validation)."""
        name = self.gpu_model
        if name is None and self.instance_type is not None:
            spec = instance_type(self.instance_type)
            name = spec.gpu_model if spec else None
        model = gpu_model(name) if name else None
        if model is None:
            raise LookupError(f"pool {self.name}: GPU model unknown (set gpuModel)")
        return model

    def gpus_per_node(self) -> int:
        """GPUs in each node (valid after StackConfig validation)."""
        if self.gpu_count is not None:
            return self.gpu_count
        spec = instance_type(self.instance_type) if self.instance_type else None
        if spec is None:
            raise LookupError(f"pool {self.name}: GPU count unknown (set gpuCount)")
        return spec.gpu_count

    def gpu_software(self) -> GpuSoftware:
        """The catalog's driver/CUDA/cuDNN record for TKE's gpu_args (valid after StackConfig validation):
        the one gpuDriver names, else the default for the GPU model."""
        chosen = self.gpu_driver.chosen(self.gpu_spec())
        if not chosen:
            raise LookupError(f"pool {self.name}: no catalog driver/CUDA/cuDNN combination fits gpuDriver")
        return chosen[0]


class NvidiaPool(PoolBase):
    """Whole GPUs, exclusive, through NVIDIA's device plugin (nvidia.com/gpu)."""

    kind: Literal["nvidia"] = Field(description="Pool kind.")


class SharedPool(PoolBase):
    """Fractions of GPUs through Tessera (tessera.dev/gpu-core, tessera.dev/gpu-memory)."""

    kind: Literal["shared"] = Field(description="Pool kind.")
    sharing: SharingConfig = Field(default_factory=SharingConfig, description="Isolation policy, GPU placement, online/offline, qGPU aliases.")


class MigPool(PoolBase):
    """Hardware-partitioned GPUs (MIG) through NVIDIA's device plugin and mig-manager."""

    kind: Literal["mig"] = Field(description="Pool kind.")
    mig: MigConfig = Field(description="MIG strategy and layout.")
    time_slicing: TimeSlicingConfig | None = Field(default=None, description="Optional time-slicing of MIG slices (replicas per mig resource).")


class TimeslicePool(PoolBase):
    """Whole GPUs advertised several times by NVIDIA's device plugin (time-slicing; no isolation)."""

    kind: Literal["timeslice"] = Field(description="Pool kind.")
    time_slicing: TimeSlicingConfig = Field(description="Replicas per GPU.")


NodePool = Annotated[NvidiaPool | SharedPool | MigPool | TimeslicePool, Field(discriminator="kind")]
# kind -> model class; read-only so no caller can change what a kind means
POOL_CLASSES: Mapping[str, type[PoolBase]] = MappingProxyType({"nvidia": NvidiaPool, "shared": SharedPool, "mig": MigPool, "timeslice": TimeslicePool})
