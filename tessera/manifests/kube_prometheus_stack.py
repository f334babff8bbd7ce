"""kube-prometheus-stack (prometheus-community Helm chart) for `monitoring.mode: kube-prometheus-stack`.

Prometheus Operator with its CRDs, one Prometheus, Alertmanager, Grafana, kube-state-metrics and
node-exporter, installed like gpu-operator (Pulumi helm v4 `Chart`; `tessera render` writes the
values and the `helm upgrade --install` line). Keys as in the chart's values.yaml at the pinned
version (67.8.0, prometheus-community/helm-charts `charts/kube-prometheus-stack/values.yaml`).

What Tessera sets and why:
- the chart's Prometheus keeps its default selectors (`*SelectorNilUsesHelmValues: true`): it
  picks ServiceMonitors and PrometheusRules labelled `release: <releaseName>`, which Tessera's
  objects and gpu-operator's dcgm-exporter ServiceMonitor carry (`MonitoringConfig.object_labels`);
- retention, retention size, storage and resources from the stack;
- Grafana's admin credentials from a Secret Tessera creates from a Pulumi secret (`GRAFANA_ADMIN_SECRET`),
  never the chart's built-in password; its dashboard sidecar watches the label
  `monitoring.dashboards` names, in every namespace (Tessera's dashboards live in Tessera's).
The namespace is created by the "platform" component, privileged: node-exporter mounts host paths
and uses the host's network and PID namespaces.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig

CHART: Final = "kube-prometheus-stack"
GRAFANA_ADMIN_SECRET: Final = "tessera-grafana-admin"
GRAFANA_USER_KEY: Final = "admin-user"
GRAFANA_PASSWORD_KEY: Final = "admin-password"


def _grafana_values(config: StackConfig) -> dict[str, Any]:
    grafana = config.monitoring.kube_prometheus_stack.grafana
    if not grafana.enabled:
        return {"enabled": False}
    dashboards = config.monitoring.dashboards
    return {
        "enabled": True,
        "admin": {"existingSecret": GRAFANA_ADMIN_SECRET, "userKey": GRAFANA_USER_KEY, "passwordKey": GRAFANA_PASSWORD_KEY},
        "defaultDashboardsEnabled": True,
        "sidecar": {"dashboards": {"enabled": True, "label": dashboards.label, "labelValue": dashboards.label_value, "searchNamespace": "ALL"}},
        "resources": grafana.resources.to_values(),
    }


def _prometheus_spec(config: StackConfig) -> dict[str, Any]:
    kps = config.monitoring.kube_prometheus_stack
    spec: dict[str, Any] = {
        "retention": kps.retention,
        "resources": kps.prometheus_resources.to_values(),
        "scrapeInterval": f"{config.monitoring.scrape_interval_seconds}s",
    }
    if kps.retention_size is not None:
        spec["retentionSize"] = kps.retention_size
    if kps.storage_size_gib is not None:
        claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{kps.storage_size_gib}Gi"}}}
        if kps.storage_class is not None:
            claim["storageClassName"] = kps.storage_class
        spec["storageSpec"] = {"volumeClaimTemplate": {"spec": claim}}
    return spec


def kube_prometheus_stack_values(config: StackConfig) -> dict[str, Any]:
    kps = config.monitoring.kube_prometheus_stack
    return {
        "crds": {"enabled": True},
        "alertmanager": {"enabled": kps.alertmanager},
        "grafana": _grafana_values(config),
        "prometheus": {"prometheusSpec": _prometheus_spec(config)},
    }


def grafana_admin_secret_key(config: StackConfig) -> str | None:
    """The Pulumi secret config key holding Grafana's admin password, when the stack deploys Grafana."""
    m = config.monitoring
    if m.mode != "kube-prometheus-stack" or not m.kube_prometheus_stack.grafana.enabled:
        return None
    return m.kube_prometheus_stack.grafana.admin_password_secret
