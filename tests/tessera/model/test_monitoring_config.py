"""The `monitoring` section: modes, cross-field rules, and the keys it replaced."""
from __future__ import annotations

from typing import Any

import pytest
from config_cases import TKE_BASE, edit

from tessera.model import ConfigError, StackConfig, from_pulumi_mapping

KPS = {"mode": "kube-prometheus-stack", "kubePrometheusStack": {"grafana": {"adminPasswordSecret": "grafanaAdminPassword"}}}


def _with(monitoring: dict[str, Any], **top: Any) -> dict[str, Any]:
    data = edit(TKE_BASE, "monitoring", monitoring)
    for key, value in top.items():
        data = edit(data, key, value)
    return data


def _problems(data: dict[str, Any]) -> list[str]:
    try:
        from_pulumi_mapping(data)
    except ConfigError as error:
        return [str(p) for p in error.problems]
    return []


@pytest.mark.parametrize(
    ("monitoring", "top", "problem"),
    [
        ({"serviceMonitors": True}, {}, "monitoring: serviceMonitors was replaced by mode: use mode: existing"),
        ({"mode": "prometheus"}, {}, "monitoring.mode: 'prometheus' is not valid (valid: kube-prometheus-stack, existing, none)"),
        ({"alerts": {"poolAllocationPercent": 80}}, {}, "monitoring.alerts: only applies with mode kube-prometheus-stack or existing"),
        ({"dashboards": {"label": "dash"}}, {}, "monitoring.dashboards: only applies with mode kube-prometheus-stack or existing"),
        ({"selectorLabels": {"release": "x"}}, {}, "monitoring.selectorLabels: only applies with mode kube-prometheus-stack or existing"),
        ({"mode": "existing", "kubePrometheusStack": {"retention": "7d"}}, {}, "monitoring.kubePrometheusStack: only applies with mode kube-prometheus-stack (mode is existing)"),
        ({"mode": "existing", "enabled": False}, {}, "monitoring.enabled: false closes the metrics ports to Prometheus, which mode existing scrapes"),
        ({"mode": "kube-prometheus-stack"}, {}, "monitoring.kubePrometheusStack.grafana.adminPasswordSecret: is required with Grafana on"),
        ({**KPS, "kubePrometheusStack": {"grafana": {"adminPasswordSecret": "monitoring"}}}, {}, "monitoring.kubePrometheusStack.grafana.adminPasswordSecret: 'monitoring' is a Tessera setting"),
        ({**KPS, "kubePrometheusStack": {"grafana": {"enabled": False, "adminPasswordSecret": "x"}}}, {}, "monitoring.kubePrometheusStack.grafana.adminPasswordSecret: only applies with grafana.enabled: true"),
        ({**KPS, "kubePrometheusStack": {**KPS["kubePrometheusStack"], "namespace": "tessera-system"}}, {}, "monitoring.kubePrometheusStack.namespace: 'tessera-system' is also namespace"),
        ({**KPS, "kubePrometheusStack": {**KPS["kubePrometheusStack"], "namespace": "gpu-operator"}}, {}, "monitoring.kubePrometheusStack.namespace: 'gpu-operator' is also gpuOperator.namespace"),
        ({**KPS, "kubePrometheusStack": {**KPS["kubePrometheusStack"], "storageClass": "cbs"}}, {}, "monitoring.kubePrometheusStack.storageClass: only applies with storageSizeGiB"),
        ({**KPS, "kubePrometheusStack": {**KPS["kubePrometheusStack"], "retention": "15 days"}}, {}, "monitoring.kubePrometheusStack.retention: '15 days' is not a Prometheus duration"),
        ({**KPS, "kubePrometheusStack": {**KPS["kubePrometheusStack"], "retentionSize": "45G"}}, {}, "monitoring.kubePrometheusStack.retentionSize: '45G' is not a Prometheus size"),
        ({**KPS, "kubePrometheusStack": {**KPS["kubePrometheusStack"], "prometheusResources": {"cpuRequest": "1 core", "memoryRequest": "1Gi", "cpuLimit": "2", "memoryLimit": "2Gi"}}}, {},
         "monitoring.kubePrometheusStack.prometheusResources.cpuRequest: '1 core' is not a Kubernetes quantity"),
        ({"mode": "existing", "alerts": {"poolAllocationPercent": 120}}, {}, "monitoring.alerts.poolAllocationPercent: must be <= 100"),
        ({"mode": "existing", "alerts": {"strandedSharePercent": 0}}, {}, "monitoring.alerts.strandedSharePercent: must be > 0"),
        ({"mode": "existing", "alerts": {"offlinePausedMinutes": 0}}, {}, "monitoring.alerts.offlinePausedMinutes: must be >= 1"),
        ({"mode": "existing", "alerts": {"extenderP99Seconds": 5}}, {}, "monitoring.alerts.extenderP99Seconds: 5.0s is not below scheduler.httpTimeoutSeconds (5.0s)"),
        ({"mode": "existing", "alerts": {"extenderPercentile": 99}}, {}, "monitoring.alerts.extenderPercentile: unknown key 'extenderPercentile' (did you mean 'extenderErrorPercent'?"),
        ({"metricsPort": 9501}, {}, "monitoring.devicePluginMetricsPort: 9501 is also metricsPort"),
    ],
)
def test_bad_monitoring_config_is_reported_at_its_path(monitoring: dict[str, Any], top: dict[str, Any], problem: str) -> None:
    problems = _problems(_with(monitoring, **top))
    assert any(p.startswith(problem) for p in problems), problems


@pytest.mark.parametrize(
    "monitoring",
    [
        {},
        {"mode": "none", "prometheusAdapter": True},
        {"mode": "existing", "selectorLabels": {"release": "prom"}, "alerts": {"poolAllocationPercent": 80, "offlinePausedMinutes": 10}},
        {"mode": "existing", "dashboards": {"label": "grafana_dashboard", "labelValue": "tessera", "namespace": "grafana"}},
        {**KPS, "kubePrometheusStack": {**KPS["kubePrometheusStack"], "storageSizeGiB": 50, "storageClass": "cbs", "retention": "30d", "retentionSize": "45GB"}},
        {"mode": "kube-prometheus-stack", "kubePrometheusStack": {"grafana": {"enabled": False}}},
    ],
)
def test_good_monitoring_config_validates(monitoring: dict[str, Any]) -> None:
    assert isinstance(from_pulumi_mapping(_with(monitoring)), StackConfig)


def test_kube_prometheus_stack_mode_labels_objects_for_its_release() -> None:
    config = from_pulumi_mapping(_with({**KPS, "selectorLabels": {"team": "gpu"}, "kubePrometheusStack": {**KPS["kubePrometheusStack"], "releaseName": "kps"}}))
    assert config.monitoring.object_labels() == {"release": "kps", "team": "gpu"}
    assert config.monitoring.prometheus_query_url() == "http://prometheus-operated.monitoring.svc:9090"


def test_plan_shows_what_monitoring_turns_on() -> None:
    from tessera.model.plan import plan_stack

    plan = plan_stack(from_pulumi_mapping(_with({**KPS, "alerts": {"poolAllocationPercent": 85}})))
    assert "kube-prometheus-stack" in plan.cluster_components
    text = "\n".join(plan.monitoring)
    assert "kube-prometheus-stack 67.8.0 as release kube-prometheus-stack in namespace monitoring: Prometheus, Alertmanager, Grafana" in text
    assert "tessera-extender, tessera-node-agent, tessera-device-plugin, tessera-webhook, dcgm-exporter" in text
    assert "pool allocation > 85%" in text
    assert plan.to_json()["monitoring"] == list(plan.monitoring)
    none = plan_stack(from_pulumi_mapping(TKE_BASE))
    assert none.monitoring == ("mode none: /metrics with prometheus.io/* annotations only (no ServiceMonitor, alert or dashboard)",)
