"""prometheus-adapter (prometheus-community Helm chart): Triton's queue time per request as a custom
metric, so an HPA can scale inference on it (seed 004; examples/triton/).

Installed only with `monitoring.enabled` and `monitoring.prometheusAdapter`, into Tessera's own
namespace (which Tessera creates, so the release never depends on a namespace someone else owns).
It serves `custom.metrics.k8s.io` (and `external.metrics.k8s.io` once a workload declares an External
metric) only: `rules.default` is off (no generic rules exposing every
series) and no resource-metrics rules are set, so it never takes `metrics.k8s.io` from the cluster's
metrics-server.

The rule: for each pod, queue time accumulated per second divided by successful requests per
second, over 1 min (rate() needs two samples in the window; 1m holds four at Triton's usual 15 s
scrape), which is the mean time a request waited in Triton's queue (µs):

    sum(rate(nv_inference_queue_duration_us[1m])) / sum(rate(nv_inference_request_success[1m]))

The divisor is clamped to a tiny positive rate so an idle pod reads 0 instead of NaN (0/0), and a
pod whose requests all queue and none succeed reads very large (scale up), not NaN.

Workloads (`workloads[].scaling.metric.query`) add their own rules, generated the same way by
`metric_rule`: a Pods metric becomes a `rules.custom` entry per pod (namespace and pod from the
labels prometheus-operator's PodMonitor adds), an External metric a `rules.external` entry summed over
the HPA's namespace and `metric.selector` (the chart renders those as `externalRules` and registers
external.metrics.k8s.io only when there are some). The rule's `name.as` is the workload's metric
name, so the HPA asks for exactly what the adapter serves.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from tessera.model.workloads import ADAPTER_METRICS, QUEUE_TIME_METRIC, MetricQuery, MetricType

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig

RELEASE_NAME: Final = "prometheus-adapter"
CHART: Final = "prometheus-adapter"
QUEUE_METRIC: Final = QUEUE_TIME_METRIC
# how often the adapter re-reads which series exist; at least the scrape interval
RELIST_INTERVAL: Final = "1m"
REPLICAS: Final = 2  # HPAs keep their metric through a node drain (budget below)
_URL: Final = re.compile(r"^(?P<base>https?://[^/:\s]+)(?::(?P<port>\d+))?(?P<path>/\S*)?$")


@dataclass(frozen=True)
class PrometheusAdapterChart:
    """Everything a Helm release of prometheus-adapter needs (Pulumi `helm.v4.Chart` or `helm install`)."""

    version: str
    namespace: str
    repo: str
    values: dict[str, Any] = field(default_factory=dict)
    release_name: str = RELEASE_NAME
    chart: str = CHART


def split_prometheus_url(url: str) -> dict[str, Any]:
    """The chart's `prometheus` values: it joins `url`, `port` and `path` into --prometheus-url."""
    match = _URL.match(url.rstrip("/"))
    if match is None:  # StackConfig validated it as an http(s) URL; guard for direct callers
        raise ValueError(f"{url!r} is not scheme://host[:port][/path]")
    default_port = 443 if url.startswith("https://") else 80
    return {"url": match["base"], "port": int(match["port"] or default_port), "path": match["path"] or ""}


def _aggregate(series: str, query: MetricQuery, by: str) -> str:
    selected = f"{series}{{<<.LabelMatchers>>}}"
    inner = f"rate({selected}[{query.window}])" if query.kind == "counter" else selected
    return f"sum({inner})" + (f" by ({by})" if by else "")


def metric_rule(name: str, metric_type: MetricType, query: MetricQuery) -> dict[str, Any]:
    """The adapter rule serving `name`: per pod (Pods; a `rules.custom` entry) or one value per
    namespace and selector (External; a `rules.external` entry)."""
    pods = metric_type == "Pods"
    by = "<<.GroupBy>>" if pods else ""
    metrics_query = _aggregate(query.series, query, by)
    if query.divide_by is not None:
        metrics_query += f" / clamp_min({_aggregate(query.divide_by, query, by)}, 1e-9)"
    overrides: dict[str, Any] = {"namespace": {"resource": "namespace"}}
    if pods:
        overrides["pod"] = {"resource": "pod"}
    return {
        "seriesQuery": f'{query.series}{{namespace!="",pod!=""}}' if pods else f'{query.series}{{namespace!=""}}',
        "resources": {"overrides": overrides},
        "name": {"matches": f"^{query.series}$", "as": name},
        "metricsQuery": metrics_query,
    }


def queue_time_rule() -> dict[str, Any]:
    """The custom-metrics rule for `avg_time_queue_us`, per pod (and summed per namespace)."""
    metric_type, query = ADAPTER_METRICS[QUEUE_TIME_METRIC]
    return metric_rule(QUEUE_METRIC, metric_type, query)


def workload_rules(config: StackConfig) -> dict[str, list[dict[str, Any]]]:
    """`custom` and `external` rules for the metrics workloads declare (one per metric name; the
    stack rules refuse two declarations of one name that differ)."""
    out: dict[str, list[dict[str, Any]]] = {"custom": [], "external": []}
    seen: set[str] = set()
    for w in config.workloads:
        metric = w.scaling.metric
        if metric is None or metric.query is None or metric.name in seen or metric.name in ADAPTER_METRICS:
            continue
        seen.add(metric.name)
        out["custom" if metric.type == "Pods" else "external"].append(metric_rule(metric.name, metric.type, metric.query))
    return out


def _rules(config: StackConfig) -> dict[str, Any]:
    declared = workload_rules(config)
    rules: dict[str, Any] = {"default": False, "custom": [queue_time_rule(), *declared["custom"]]}
    if declared["external"]:
        rules["external"] = declared["external"]
    return rules


def prometheus_adapter_values(config: StackConfig) -> dict[str, Any]:
    """Chart values (keys as in prometheus-community/prometheus-adapter's values.yaml, 4.x)."""
    return {
        "prometheus": split_prometheus_url(config.monitoring.prometheus_query_url()),
        "metricsRelistInterval": RELIST_INTERVAL,
        "replicas": REPLICAS,
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
        "rules": _rules(config),
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
    }


def prometheus_adapter_chart(config: StackConfig) -> PrometheusAdapterChart | None:
    """The release, or None unless `monitoring.enabled` and `monitoring.prometheusAdapter` are on."""
    monitoring = config.monitoring
    if not (monitoring.enabled and monitoring.prometheus_adapter):
        return None
    return PrometheusAdapterChart(
        version=monitoring.prometheus_adapter_chart_version,
        namespace=config.namespace,
        repo=monitoring.prometheus_adapter_chart_repository,
        values=prometheus_adapter_values(config),
    )
