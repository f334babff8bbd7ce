"""The `workloads` section: inference services on a GPU share, scaled on a custom metric.

A workload is one Deployment of one container on one pool: a fraction of a GPU on a `shared` pool
(`gpu.core` %, `gpu.memoryMiB`), one MIG slice on a `mig` pool (`gpu.migProfile`) or whole GPUs on
an `nvidia` (or time-sliced on a `timeslice`) pool (`gpu.gpus`). `tessera.manifests.workloads`
turns it into a Deployment, a Service, a PodDisruptionBudget, an autoscaling/v2
HorizontalPodAutoscaler and, with a Prometheus Operator, a PodMonitor; the scaling metric becomes
a prometheus-adapter rule (`tessera.manifests.prometheus_adapter`). Cross-field rules (the pool
fits the request, quotas hold, the metric is served) live in `rules_workloads`.

The metric either comes from a rule the adapter always serves (`ADAPTER_METRICS`: Triton's queue
time per request) or is declared with `metric.query`, from which the adapter rule is generated, so
the name the HPA asks for and the name the adapter serves can never drift apart.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, Field

from tessera.model.base import ConfigModel
from tessera.model.contract import AppClass
from tessera.model.monitoring import Duration, Quantity, Resources
from tessera.model.platform import ImageRef
from tessera.model.values import DnsLabel, EnvVarName, Labels

MetricType = Literal["Pods", "External"]
TargetType = Literal["AverageValue", "Value"]
SeriesKind = Literal["counter", "gauge"]
PortProtocol = Literal["TCP", "UDP"]
ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]

_PORT_NAME: Final = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_METRIC_NAME: Final = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_SERVICE_NAME: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_HTTP_PATH: Final = re.compile(r"^/[^\s]*$")


def _port_name(value: str) -> str:
    # IANA_SVC_NAME, as Kubernetes checks container port names (validation.IsValidPortName)
    if len(value) > 15 or not _PORT_NAME.match(value) or "--" in value or not any(c.isalpha() for c in value):
        raise ValueError(f"{value!r} is not a port name (at most 15 lower-case letters, digits and single '-', with at least one letter)")
    return value


def _metric_name(value: str) -> str:
    if not _METRIC_NAME.match(value):
        raise ValueError(f"{value!r} is not a Prometheus metric name such as avg_time_queue_us (letters, digits and '_')")
    return value


def _service_name(value: str) -> str:
    # the Service is named after the workload, and Service names are DNS-1035 labels
    if not _SERVICE_NAME.match(value):
        raise ValueError(f"{value!r} must start with a letter (it also names the workload's Service)")
    return value


def _http_path(value: str) -> str:
    if not _HTTP_PATH.match(value):
        raise ValueError(f"{value!r} is not an HTTP path such as /metrics")
    return value


PortName = Annotated[str, AfterValidator(_port_name)]
MetricName = Annotated[str, AfterValidator(_metric_name)]
WorkloadName = Annotated[DnsLabel, AfterValidator(_service_name)]
HttpPath = Annotated[str, AfterValidator(_http_path)]


class WorkloadPort(ConfigModel):
    """A port the container listens on; the Service exposes it under the same name and number."""

    name: PortName = Field(description="Port name, e.g. http (probes, the metrics endpoint and the Service refer to it).")
    port: int = Field(ge=1, le=65535, description="Container port number; the Service port has the same number.")
    protocol: PortProtocol = Field(default="TCP", description="TCP or UDP.")


class KeyRef(ConfigModel):
    """One key of a Secret or ConfigMap in the workload's namespace."""

    name: DnsLabel = Field(description="Secret or ConfigMap name.")
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$", description="Key in it.")


class EnvVar(ConfigModel):
    """An environment variable: a literal value, or a key of a Secret or ConfigMap (set exactly one)."""

    name: EnvVarName = Field(description="Variable name.")
    value: str | None = Field(default=None, description="Literal value.")
    secret: KeyRef | None = Field(default=None, description="Read from a Secret key (credentials never go in the stack file).")
    config_map: KeyRef | None = Field(default=None, description="Read from a ConfigMap key.")


class WorkloadVolume(ConfigModel):
    """A volume mounted into the container: a PersistentVolumeClaim or a ConfigMap (set exactly one)."""

    name: DnsLabel = Field(description="Volume name.")
    mount_path: str = Field(pattern=r"^/", description="Where it is mounted, an absolute path, e.g. /models.")
    read_only: bool = Field(default=True, description="Mount read-only.")
    claim_name: DnsLabel | None = Field(default=None, description="PersistentVolumeClaim in the workload's namespace, e.g. a ReadOnlyMany claim holding a model repository.")
    config_map: DnsLabel | None = Field(default=None, description="ConfigMap in the workload's namespace.")


class HttpProbe(ConfigModel):
    """An HTTP GET probe on one of the workload's ports."""

    path: HttpPath = Field(description="Path, e.g. /v2/health/ready.")
    port: PortName = Field(description="Name of a port in `ports`.")
    initial_delay_seconds: int = Field(default=0, ge=0, le=3600, description="Seconds after start before the first probe (model loading).")
    period_seconds: int = Field(default=10, ge=1, le=300, description="Seconds between probes.")
    failure_threshold: int = Field(default=3, ge=1, le=100, description="Failures in a row before the probe fails.")


class WorkloadGpu(ConfigModel):
    """The GPU share of one replica. Set the keys of the pool's kind: `core` (and `memoryMiB`) on a shared
    pool, `migProfile` on a mig pool, `gpus` on an nvidia or timeslice pool."""

    core: int | None = Field(default=None, ge=1, description="Shared pools: tessera.dev/gpu-core, percent of one GPU (1..100), or N x 100 for N whole GPUs.")
    memory_mib: int | None = Field(default=None, ge=1, alias="memoryMiB", description="Shared pools: tessera.dev/gpu-memory, MiB on each GPU the replica gets (at most the GPU's memory). Unset: no memory limit.")
    mig_profile: str | None = Field(default=None, min_length=1, description="Mig pools: one slice of this MIG profile, e.g. 1g.5gb; it must be in the pool's layout.")
    gpus: int | None = Field(default=None, ge=1, le=16, description="Nvidia pools: whole GPUs (nvidia.com/gpu); timeslice pools: time-sliced replicas of a GPU.")


class MetricQuery(ConfigModel):
    """How prometheus-adapter computes the metric from Prometheus series; the adapter rule is generated from it.

    counter: `sum(rate(series[window]))`, gauge: `sum(series)`; with `divideBy`, that divided by the same
    of the other series (clamped above zero, so an idle pod reads 0, not NaN). Pods metrics are summed
    per pod; External metrics over the HPA's namespace and `metric.selector`.
    """

    series: MetricName = Field(description="Prometheus series the workload exports, e.g. nv_inference_queue_duration_us.")
    kind: SeriesKind = Field(default="counter", description="counter (read as a per-second rate over `window`) or gauge (read as is).")
    divide_by: MetricName | None = Field(default=None, description="Series of the same kind to divide by, e.g. nv_inference_request_success: queue time per request.")
    window: Duration = Field(default="1m", description="rate() window for counters; at least two scrapes long.")


class ScalingMetric(ConfigModel):
    """The custom metric the HorizontalPodAutoscaler scales on, served by prometheus-adapter."""

    name: MetricName = Field(description="Metric name as the adapter serves it, e.g. avg_time_queue_us (built in: Triton's queue time per request in µs).")
    type: MetricType = Field(default="Pods", description="Pods: a value per pod, averaged over the replicas (custom.metrics.k8s.io); External: one value for the workload's namespace (external.metrics.k8s.io).")
    target: Quantity = Field(description="Target value, a Kubernetes quantity such as 50 or 500m; more replicas when the metric is above it.")
    target_type: TargetType = Field(default="AverageValue", description="AverageValue: the metric divided by the replicas is held at target (Pods metrics always); Value (External only): the metric itself.")
    selector: Labels = Field(default_factory=dict, description="External only: label matchers passed to the adapter (metric.selector.matchLabels of the HPA).")
    query: MetricQuery | None = Field(default=None, description="Declare the metric: the adapter rule is generated from it. Unset: the name must be one the adapter serves already (avg_time_queue_us).")


class WorkloadScaling(ConfigModel):
    """Replica bounds and the autoscaling target. Without `metric`, minReplicas must equal maxReplicas (a fixed count, no HPA)."""

    min_replicas: int = Field(default=1, ge=1, le=1000, description="Fewest replicas (the HPA's minReplicas).")
    max_replicas: int = Field(default=1, ge=1, le=1000, description="Most replicas (the HPA's maxReplicas); quotas and pool capacity are checked at this count.")
    metric: ScalingMetric | None = Field(default=None, description="Custom metric to scale on (needs monitoring.prometheusAdapter: true).")
    scale_down_stabilization_seconds: int = Field(default=300, ge=0, le=3600, description="How long the HPA waits before giving replicas (GPU shares) back after load drops.")


class WorkloadMetrics(ConfigModel):
    """Where Prometheus scrapes the workload: a PodMonitor in modes kube-prometheus-stack and existing,
    prometheus.io/* pod annotations in mode none."""

    port: PortName = Field(description="Name of the port in `ports` that serves metrics, e.g. metrics (Triton's 8002).")
    path: HttpPath = Field(default="/metrics", description="Metrics path.")
    interval_seconds: int = Field(default=15, ge=5, le=300, description="Scrape interval; a counter metric's window must hold at least two scrapes.")


class Workload(ConfigModel):
    """One inference service: a Deployment of one container on one GPU pool, its Service, autoscaler and scraping."""

    name: WorkloadName = Field(max_length=52, description="Name of the Deployment, Service, HPA and PodMonitor; unique per namespace, at most 52 characters (room for pod name suffixes).")
    namespace: DnsLabel = Field(description="Namespace the workload runs in (not Tessera's own).")
    create_namespace: bool = Field(default=False, description="Let Tessera create the namespace (Pod Security restricted); otherwise it must exist, like a quota's namespace.")
    image: ImageRef = Field(description="Container image by tag or digest; images.requireDigests applies to it too.")
    command: list[str] = Field(default_factory=list, description="Entrypoint; empty keeps the image's.")
    args: list[str] = Field(default_factory=list, description="Arguments; empty keeps the image's.")
    env: list[EnvVar] = Field(default_factory=list, description="Environment variables.")
    ports: list[WorkloadPort] = Field(default_factory=list, description="Ports the container serves; the Service exposes them all.")
    pool: DnsLabel = Field(description="Name of the node pool (nodePools[].name) the replicas run on.")
    gpu: WorkloadGpu = Field(description="GPU share of one replica.")
    app_class: AppClass | None = Field(default=None, description="Shared pools with sharing.onlineOffline: online work preempts and pauses offline work on the same GPU.")
    resources: Resources = Field(
        default_factory=lambda: Resources(cpu_request="1", memory_request="2Gi", cpu_limit="2", memory_limit="4Gi"),
        description="CPU and memory of the container. Default requests 1/2Gi, limits 2/4Gi.",
    )
    scaling: WorkloadScaling = Field(default_factory=WorkloadScaling, description="Replicas and the autoscaling metric.")
    metrics: WorkloadMetrics | None = Field(default=None, description="How Prometheus scrapes the workload; required for a Pods metric (read from the workload's own pods).")
    readiness_probe: HttpProbe | None = Field(default=None, description="Readiness probe; a replica takes traffic once it passes.")
    liveness_probe: HttpProbe | None = Field(default=None, description="Liveness probe; the container restarts when it fails.")
    volumes: list[WorkloadVolume] = Field(default_factory=list, description="Volumes mounted into the container.")
    run_as_user: int | None = Field(default=None, ge=1, le=2147483647, description="UID the container runs as (never root); unset: the image's user, which must be numeric and not 0.")
    service_type: ServiceType = Field(default="ClusterIP", description="Type of the workload's Service.")


# Metrics every prometheus-adapter Tessera installs serves (its rules are in
# tessera.manifests.prometheus_adapter, generated from these queries): name -> (type, query).
QUEUE_TIME_METRIC: Final = "avg_time_queue_us"
ADAPTER_METRICS: Final[Mapping[str, tuple[MetricType, MetricQuery]]] = MappingProxyType({
    QUEUE_TIME_METRIC: ("Pods", MetricQuery(series="nv_inference_queue_duration_us", divide_by="nv_inference_request_success", window="1m")),
})
