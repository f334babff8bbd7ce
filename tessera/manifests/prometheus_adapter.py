"""prometheus-adapter (prometheus-community Helm chart): Triton's queue time per request as a custom
metric, so an HPA can scale inference on it (seed 004; examples/triton/).

Installed only with `monitoring.enabled` and `monitoring.prometheusAdapter`, into Tessera's own
namespace (which Tessera creates, so the release never depends on a namespace someone else owns).
It serves `custom.metrics.k8s.io` only: `rules.default` is off (no generic rules exposing every
series) and no resource-metrics rules are set, so it never takes `metrics.k8s.io` from the cluster's
metrics-server.

The rule: for each pod, queue time accumulated per second divided by successful requests per
second, over `QUEUE_WINDOW`, which is the mean time a request waited in Triton's queue (µs):

    sum(rate(nv_inference_queue_duration_us[1m])) / sum(rate(nv_inference_request_success[1m]))

The divisor is clamped to a tiny positive rate so an idle pod reads 0 instead of NaN (0/0), and a
pod whose requests all queue and none succeed reads very large (scale up), not NaN.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig

RELEASE_NAME: Final = "prometheus-adapter"
CHART: Final = "prometheus-adapter"
QUEUE_METRIC: Final = "avg_time_queue_us"
QUEUE_DURATION_SERIES: Final = "nv_inference_queue_duration_us"
REQUEST_SUCCESS_SERIES: Final = "nv_inference_request_success"
# rate() needs at least two samples in the window; 1m holds four at Triton's usual 15 s scrape
QUEUE_WINDOW: Final = "1m"
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


def queue_time_rule() -> dict[str, Any]:
    """The custom-metrics rule for `avg_time_queue_us`, per pod (and summed per namespace)."""
    by = "<<.GroupBy>>"
    labels = "<<.LabelMatchers>>"
    queued = f"sum(rate({QUEUE_DURATION_SERIES}{{{labels}}}[{QUEUE_WINDOW}])) by ({by})"
    served = f"sum(rate({REQUEST_SUCCESS_SERIES}{{{labels}}}[{QUEUE_WINDOW}])) by ({by})"
    return {
        "seriesQuery": f'{QUEUE_DURATION_SERIES}{{namespace!="",pod!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": f"^{QUEUE_DURATION_SERIES}$", "as": QUEUE_METRIC},
        "metricsQuery": f"{queued} / clamp_min({served}, 1e-9)",
    }


def prometheus_adapter_values(config: StackConfig) -> dict[str, Any]:
    """Chart values (keys as in prometheus-community/prometheus-adapter's values.yaml, 4.x)."""
    return {
        "prometheus": split_prometheus_url(config.monitoring.prometheus_query_url()),
        "metricsRelistInterval": RELIST_INTERVAL,
        "replicas": REPLICAS,
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
        "rules": {"default": False, "custom": [queue_time_rule()]},
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
