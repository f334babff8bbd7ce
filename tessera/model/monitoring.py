"""The `monitoring` section: how Prometheus scrapes Tessera, its dashboards and alerts.

`mode` picks what Tessera deploys:

- `kube-prometheus-stack`: the prometheus-community chart (Prometheus Operator, Prometheus,
  Alertmanager, Grafana, kube-state-metrics, node-exporter), pinned, plus everything below;
- `existing`: only ServiceMonitors, a PrometheusRule and the dashboard ConfigMap, for a Prometheus
  Operator (and Grafana sidecar) the cluster already runs; `selectorLabels` makes its selectors match;
- `none`: nothing for Prometheus; the components still serve /metrics, announced with
  `prometheus.io/*` annotations on their Services for annotation-based scrapers.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, model_validator

from tessera.model.base import ConfigModel
from tessera.model.values import DnsLabel, HttpUrl, LabelKey, Labels, PulumiKey, Version

MonitoringMode = Literal["kube-prometheus-stack", "existing", "none"]
DEFAULT_PROMETHEUS_URL: Final = "http://prometheus-operated.monitoring.svc:9090"
DEFAULT_PROMETHEUS_ADAPTER_CHART_VERSION: Final = "4.11.0"
PROMETHEUS_COMMUNITY_REPOSITORY: Final = "https://prometheus-community.github.io/helm-charts"
DEFAULT_KUBE_PROMETHEUS_STACK_VERSION: Final = "67.8.0"
DEFAULT_RUNBOOK_URL: Final = "https://github.com/tessera-gpu/tessera/blob/main/docs/runbooks.md"
_QUANTITY: Final = re.compile(r"^([0-9]+(\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_DURATION: Final = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_SIZE: Final = re.compile(r"^[0-9]+(\.[0-9]+)?(B|KB|MB|GB|TB|PB|EB)$")


def _quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity such as 500m, 2, 512Mi or 4Gi")
    return value


def _duration(value: str) -> str:
    if not _DURATION.match(value):
        raise ValueError(f"{value!r} is not a Prometheus duration such as 15d, 12h or 2w")
    return value


def _size(value: str) -> str:
    if not _SIZE.match(value):
        raise ValueError(f"{value!r} is not a Prometheus size such as 45GB or 500MB")
    return value


Quantity = Annotated[str, AfterValidator(_quantity)]
Duration = Annotated[str, AfterValidator(_duration)]
RetentionSize = Annotated[str, AfterValidator(_size)]


class Resources(ConfigModel):
    """Container requests and limits (both always set, so a runaway pod cannot starve its node)."""

    cpu_request: Quantity = Field(description="CPU request, e.g. 500m.")
    memory_request: Quantity = Field(description="Memory request, e.g. 2Gi.")
    cpu_limit: Quantity = Field(description="CPU limit, e.g. 2.")
    memory_limit: Quantity = Field(description="Memory limit, e.g. 8Gi.")

    def to_values(self) -> dict[str, dict[str, str]]:
        return {"requests": {"cpu": self.cpu_request, "memory": self.memory_request}, "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit}}


class GrafanaConfig(ConfigModel):
    """Grafana of kube-prometheus-stack; its dashboard sidecar loads Tessera's dashboards."""

    enabled: bool = Field(default=True, description="Deploy Grafana with the chart.")
    admin_password_secret: PulumiKey | None = Field(
        default=None,
        description="Pulumi secret config key (without the tessera: prefix) holding Grafana's admin password, e.g. grafanaAdminPassword; "
        "set it with `pulumi config set --secret tessera:grafanaAdminPassword ...`. Required with Grafana on: the chart's built-in password is public.",
    )
    admin_user: str = Field(default="admin", min_length=1, max_length=64, description="Grafana's admin user name.")
    resources: Resources = Field(
        default_factory=lambda: Resources(cpu_request="100m", memory_request="256Mi", cpu_limit="1", memory_limit="1Gi"),
        description="Grafana container resources. Default requests 100m/256Mi, limits 1/1Gi.",
    )


class KubePrometheusStackConfig(ConfigModel):
    """The kube-prometheus-stack Helm chart (mode kube-prometheus-stack), installed like gpu-operator."""

    chart_version: Version = Field(default=DEFAULT_KUBE_PROMETHEUS_STACK_VERSION, description="Chart version, pinned so an upgrade is a reviewed change.")
    chart_repository: HttpUrl = Field(default=PROMETHEUS_COMMUNITY_REPOSITORY, description="Helm repository URL of the chart (a mirror for air-gapped clusters).")
    namespace: DnsLabel = Field(default="monitoring", description="Namespace of the release; Tessera creates it.")
    release_name: DnsLabel = Field(default="kube-prometheus-stack", description="Helm release name; the chart's Prometheus selects ServiceMonitors and rules labelled release: <releaseName>.")
    retention: Duration = Field(default="15d", description="How long Prometheus keeps samples.")
    retention_size: RetentionSize | None = Field(default=None, description="Most disk Prometheus uses before dropping the oldest blocks, e.g. 45GB (default: no size limit).")
    storage_size_gib: int | None = Field(default=None, ge=1, le=65536, alias="storageSizeGiB", description="PersistentVolumeClaim size for Prometheus in GiB (default: emptyDir, data lost with the pod).")
    storage_class: DnsLabel | None = Field(default=None, description="StorageClass of that claim (default: the cluster's default class).")
    prometheus_resources: Resources = Field(
        default_factory=lambda: Resources(cpu_request="500m", memory_request="2Gi", cpu_limit="2", memory_limit="8Gi"),
        description="Prometheus container resources. Default requests 500m/2Gi, limits 2/8Gi.",
    )
    alertmanager: bool = Field(default=True, description="Deploy Alertmanager (receivers are configured outside Tessera).")
    grafana: GrafanaConfig = Field(default_factory=GrafanaConfig, description="Grafana.")


class DashboardsConfig(ConfigModel):
    """Tessera's Grafana dashboards, as a ConfigMap the Grafana dashboard sidecar loads."""

    enabled: bool = Field(default=True, description="Ship the dashboards (modes kube-prometheus-stack and existing).")
    label: LabelKey = Field(default="grafana_dashboard", description="Label key the Grafana sidecar watches (kube-prometheus-stack's default).")
    label_value: str = Field(default="1", min_length=1, max_length=63, description="Value of that label.")
    namespace: DnsLabel | None = Field(default=None, description="Namespace of the ConfigMap (default: Tessera's); the sidecar must search it (kube-prometheus-stack searches all).")


class AlertsConfig(ConfigModel):
    """Thresholds of the PrometheusRule alerts (docs/monitoring.md lists every alert)."""

    enabled: bool = Field(default=True, description="Deploy the PrometheusRule (modes kube-prometheus-stack and existing).")
    pool_allocation_percent: float = Field(default=90.0, gt=0, le=100, description="TesseraPoolAllocationHigh fires when a pool's allocated GPU compute stays above this share of its capacity for 15 minutes.")
    stranded_share_percent: float = Field(default=20.0, gt=0, le=100, description="TesseraPoolStrandedHigh fires when a pool's stranded GPU compute stays above this share of its capacity for 30 minutes.")
    offline_paused_minutes: int = Field(default=30, ge=1, le=1440, description="TesseraOfflinePausedTooLong fires when an offline container stays paused this long.")
    extender_p99_seconds: float = Field(default=0.1, gt=0, le=60, description="TesseraExtenderSlow fires when the extender's p99 filter/prioritize latency stays above this for 10 minutes.")
    extender_error_percent: float = Field(default=1.0, gt=0, le=100, description="TesseraExtenderErrors fires when more than this share of extender requests fail (HTTP 5xx) or binds end in error, for 10 minutes.")
    runbook_url: HttpUrl = Field(default=DEFAULT_RUNBOOK_URL, description="Where the runbook lives; each alert's runbook_url is this plus #<alert name in lower case>.")


class MonitoringConfig(ConfigModel):
    """Metrics, scraping, dashboards and alerts (docs/monitoring.md)."""

    mode: MonitoringMode = Field(
        default="none",
        description="kube-prometheus-stack: deploy the chart and scrape, dashboards and alerts for it; existing: ServiceMonitors, "
        "PrometheusRule and dashboards for a Prometheus Operator already in the cluster; none: only /metrics with prometheus.io annotations.",
    )
    enabled: bool = Field(default=True, description="Serve metrics with prometheus.io/* scrape annotations and let Prometheus pods through the NetworkPolicies; false closes the metrics ports to scrapers (mode none only).")
    dcgm_exporter: bool = Field(default=True, description="Run NVIDIA dcgm-exporter (through the GPU operator) for card metrics, scraped through the operator's ServiceMonitor in modes kube-prometheus-stack and existing.")
    scrape_interval_seconds: int = Field(default=30, ge=5, le=300, description="Scrape interval of the ServiceMonitors.")
    metrics_port: int = Field(default=9500, ge=1024, le=65535, description="Port the node agent serves /metrics on.")
    device_plugin_metrics_port: int = Field(default=9501, ge=1024, le=65535, description="Port the Tessera device plugin serves /metrics on (same pod as the node agent, so it must differ from metricsPort).")
    selector_labels: Labels = Field(
        default_factory=dict,
        description="Labels put on every ServiceMonitor and PrometheusRule (and on gpu-operator's dcgm-exporter ServiceMonitor) so an existing "
        "Prometheus selects them, e.g. {release: kube-prometheus-stack}. Mode kube-prometheus-stack adds release: <releaseName> itself.",
    )
    kube_prometheus_stack: KubePrometheusStackConfig = Field(default_factory=KubePrometheusStackConfig, description="The chart (mode kube-prometheus-stack only).")
    dashboards: DashboardsConfig = Field(default_factory=DashboardsConfig, description="Grafana dashboards.")
    alerts: AlertsConfig = Field(default_factory=AlertsConfig, description="Alert thresholds.")
    prometheus_adapter: bool = Field(default=False, description="Install prometheus-adapter (Helm chart, in Tessera's namespace) serving Triton's queue time per request as the custom metric avg_time_queue_us, so HPAs can scale on it (seed 004).")
    prometheus_url: HttpUrl = Field(
        default=DEFAULT_PROMETHEUS_URL,
        description=f"The Prometheus prometheus-adapter queries, scheme://host[:port][/path]. Default {DEFAULT_PROMETHEUS_URL}: the Service prometheus-operator "
        "creates for every Prometheus; in mode kube-prometheus-stack the default follows kubePrometheusStack.namespace.",
    )
    prometheus_adapter_chart_version: Version = Field(default=DEFAULT_PROMETHEUS_ADAPTER_CHART_VERSION, description="prometheus-adapter Helm chart version (prometheus-community), pinned so an upgrade is a reviewed change.")
    prometheus_adapter_chart_repository: HttpUrl = Field(default=PROMETHEUS_COMMUNITY_REPOSITORY, description="Helm repository URL of the prometheus-adapter chart (a mirror for air-gapped clusters).")

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "serviceMonitors" in data:
            raise ValueError(
                "serviceMonitors was replaced by mode: use mode: existing (ServiceMonitors for a Prometheus Operator already in the cluster), "
                "mode: kube-prometheus-stack (Tessera deploys one) or mode: none (serviceMonitors: false)"
            )
        return data

    @property
    def operator(self) -> bool:
        """Whether Tessera deploys prometheus-operator objects (ServiceMonitors, PrometheusRule)."""
        return self.enabled and self.mode != "none"

    def object_labels(self) -> dict[str, str]:
        """Labels for every ServiceMonitor and PrometheusRule, so the Prometheus selects them."""
        labels = dict(self.selector_labels)
        if self.mode == "kube-prometheus-stack":
            labels.setdefault("release", self.kube_prometheus_stack.release_name)
        return dict(sorted(labels.items()))

    def prometheus_query_url(self) -> str:
        """The URL prometheus-adapter queries: the chart's Prometheus unless prometheusUrl was set."""
        if self.mode == "kube-prometheus-stack" and not self.user_set("prometheus_url"):
            return f"http://prometheus-operated.{self.kube_prometheus_stack.namespace}.svc:9090"
        return self.prometheus_url
