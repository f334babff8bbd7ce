"""Every metric a dashboard panel or an alert may query: what our components serve, what
dcgm-exporter serves, and the series Prometheus itself writes for every target.

The tuples are the model's metric declarations (`tessera.model.metrics`), which the serving
modules register, so this catalog cannot drift from the code; docs/monitoring.md's table is compared with it by a test.
"""
from __future__ import annotations

from typing import Final

from tessera.model.metrics import agent as agent_metrics
from tessera.model.metrics import device_plugin as device_plugin_metrics
from tessera.model.metrics import extender as extender_metrics
from tessera.model.metrics import webhook as webhook_metrics
from tessera.model.metrics.spec import MetricSpec
from tessera.monitoring import dcgm_counters

# component -> families it serves, in the order docs/monitoring.md lists them
COMPONENT_METRICS: Final[dict[str, tuple[MetricSpec, ...]]] = {
    "extender": extender_metrics.METRICS,
    "node-agent": agent_metrics.METRICS,
    "device-plugin": device_plugin_metrics.METRICS,
    "webhook": webhook_metrics.METRICS,
}
# Prometheus adds these to every scrape (https://prometheus.io/docs/concepts/jobs_instances/)
SCRAPE_SERIES: Final = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})


def tessera_metrics() -> list[tuple[str, MetricSpec]]:
    """(component, family) for every family Tessera serves."""
    return [(component, spec) for component, specs in COMPONENT_METRICS.items() for spec in specs]


def tessera_series() -> dict[str, MetricSpec]:
    """Series name (`_total`, `_bucket`, ...) -> the family it belongs to."""
    return {series: spec for _, spec in tessera_metrics() for series in spec.series_names()}


def known_series() -> frozenset[str]:
    """Every series name a query may use."""
    return frozenset(tessera_series()) | dcgm_counters.exported_everywhere() | SCRAPE_SERIES


def metrics_table() -> str:
    """The metric table of docs/monitoring.md (`python -m tessera.monitoring.catalog` prints it)."""
    rows = ["| metric | type | labels | served by | meaning |", "| --- | --- | --- | --- | --- |"]
    for component, spec in tessera_metrics():
        labels = ", ".join(spec.labels) or "none"
        rows.append(f"| `{spec.exposed_name}` | {spec.type} | {labels} | {component} | {spec.help} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(metrics_table(), end="")
