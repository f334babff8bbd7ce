"""What each monitoring mode deploys: ServiceMonitors that find the real Services, the
PrometheusRule, the dashboard ConfigMap, the kube-prometheus-stack release and the ports Prometheus
may reach."""
from __future__ import annotations

import json
from typing import Any, Final

import pytest
from nvidia_stack_helpers import pool, stack

from tessera.model import StackConfig
from tessera.manifests import monitoring as mon
from tessera.manifests.objects import KubeObject
from tessera.manifests.render import render_files
from tessera.manifests.stack import build_stack, helm_releases
from tessera.monitoring.alerts import alert_groups
from tessera.monitoring.dashboards import UID
from tessera.webhook.settings import TlsSettings

# prometheus-operator v0.79.2 (kube-prometheus-stack 67.8.0's CRDs, charts/crds/crds/crd-servicemonitors.yaml and
# crd-prometheusrules.yaml): the fields of the objects we write, per level of the spec
SERVICE_MONITOR_SPEC: Final = {"endpoints", "selector", "namespaceSelector", "jobLabel", "targetLabels", "podTargetLabels", "sampleLimit"}
ENDPOINT: Final = {"port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels", "relabelings", "metricRelabelings", "tlsConfig", "targetPort"}
RELABELING: Final = {"action", "regex", "replacement", "separator", "sourceLabels", "targetLabel", "modulus"}
TLS_CONFIG: Final = {"ca", "caFile", "cert", "serverName", "insecureSkipVerify", "keySecret"}
RULE_GROUP: Final = {"name", "rules", "interval", "labels", "limit"}
RULE: Final = {"alert", "record", "expr", "for", "labels", "annotations", "keep_firing_for"}

SHARED = pool("shared-a", "shared")
WHOLE = pool("whole", "nvidia")
KPS: Final = {"mode": "kube-prometheus-stack", "kubePrometheusStack": {"grafana": {"adminPasswordSecret": "grafanaAdminPassword"}}}


def _monitoring(config: StackConfig) -> list[KubeObject]:
    return build_stack(config).get("monitoring", [])


def _all(config: StackConfig) -> list[KubeObject]:
    return [o for objects in build_stack(config).values() for o in objects]


def _of(objects: list[KubeObject], kind: str) -> list[KubeObject]:
    return [o for o in objects if o["kind"] == kind]


def test_mode_none_deploys_nothing_for_prometheus_but_keeps_metrics_reachable() -> None:
    config = stack(SHARED, WHOLE, monitoring={"mode": "none"})
    assert _monitoring(config) == []
    assert "kube-prometheus-stack" not in helm_releases(config)
    objects = _all(config)
    service = next(o for o in _of(objects, "Service") if o["metadata"]["name"] == "tessera-node-metrics")
    assert service["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


@pytest.mark.parametrize("monitoring", [{"mode": "existing", "selectorLabels": {"release": "prom"}}, KPS], ids=["existing", "kube-prometheus-stack"])
def test_each_service_monitor_selects_a_real_service_port_in_tessera_namespace(monitoring: dict[str, Any]) -> None:
    config = stack(SHARED, WHOLE, monitoring=monitoring)
    objects = _all(config)
    monitors = _of(objects, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"tessera-extender", "tessera-node", "tessera-webhook"}
    jobs = set()
    for sm in monitors:
        spec = sm["spec"]
        assert spec["namespaceSelector"] == {"matchNames": [config.namespace]}
        services = [
            s for s in _of(objects, "Service")
            if s["metadata"]["namespace"] == config.namespace and spec["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert len(services) == 1, sm["metadata"]["name"]
        ports = {p["name"] for p in services[0]["spec"]["ports"]}
        for endpoint in spec["endpoints"]:
            assert endpoint["port"] in ports
            job = next(r["replacement"] for r in endpoint["relabelings"] if r["targetLabel"] == "job")
            jobs.add(job)
        assert sm["metadata"]["labels"].items() >= config.monitoring.object_labels().items()
    assert jobs == {"tessera-extender", "tessera-node-agent", "tessera-device-plugin", "tessera-webhook"}


def test_service_monitors_use_only_fields_of_the_crd() -> None:
    for sm in _of(_monitoring(stack(SHARED, monitoring={"mode": "existing"})), "ServiceMonitor"):
        assert set(sm["spec"]) <= SERVICE_MONITOR_SPEC
        for endpoint in sm["spec"]["endpoints"]:
            assert set(endpoint) <= ENDPOINT
            assert endpoint.get("scheme", "http") in ("http", "https")
            assert all(set(r) <= RELABELING and r["action"] == "replace" for r in endpoint["relabelings"])
            assert set(endpoint.get("tlsConfig", {})) <= TLS_CONFIG


def test_agent_keeps_its_workload_labels_and_the_webhook_is_verified_against_its_own_ca() -> None:
    config = stack(SHARED, monitoring={"mode": "existing"})
    monitors = {m["metadata"]["name"]: m for m in _of(_monitoring(config), "ServiceMonitor")}
    agent, plugin = monitors["tessera-node"]["spec"]["endpoints"]
    assert agent["honorLabels"] is True and "honorLabels" not in plugin  # per-container namespace/pod/container stay as served
    (webhook,) = monitors["tessera-webhook"]["spec"]["endpoints"]
    assert webhook["scheme"] == "https" and "insecureSkipVerify" not in webhook["tlsConfig"]
    assert webhook["tlsConfig"]["ca"] == {"secret": {"name": "tessera-webhook-tls", "key": "ca.crt"}}
    names = TlsSettings(config.namespace, "tessera-webhook", "tessera-webhook-tls", "tessera-webhook").dns_names()
    assert webhook["tlsConfig"]["serverName"] in names  # the certificate the webhook generates names it


def test_the_device_plugin_serves_metrics_on_its_own_port_and_prometheus_may_reach_both() -> None:
    config = stack(SHARED, monitoring={"mode": "existing", "metricsPort": 9600, "devicePluginMetricsPort": 9601})
    objects = _all(config)
    daemonset = next(o for o in _of(objects, "DaemonSet") if o["metadata"]["name"] == "tessera-node")
    plugin = next(c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "device-plugin")
    assert plugin["command"][-2:] == ["--metrics-port", "9601"]
    assert plugin["ports"] == [{"name": "plugin-metrics", "containerPort": 9601, "protocol": "TCP"}]
    policy = next(o for o in _of(objects, "NetworkPolicy") if o["metadata"]["name"] == "tessera-node")
    assert sorted(p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]) == [9600, 9601]


def test_prometheus_rule_carries_the_stacks_thresholds_and_labels() -> None:
    config = stack(SHARED, WHOLE, monitoring={"mode": "existing", "selectorLabels": {"release": "prom"}, "alerts": {"poolAllocationPercent": 70}})
    (rule,) = _of(_monitoring(config), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["spec"]["groups"] == alert_groups(mon.thresholds(config), tessera=True, dcgm=True)
    for group in rule["spec"]["groups"]:
        assert set(group) <= RULE_GROUP and all(set(r) <= RULE for r in group["rules"])
    allocation = next(r for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"] == "TesseraPoolAllocationHigh")
    assert allocation["expr"].endswith("> 0.7")


@pytest.mark.parametrize(
    ("pools", "monitoring", "groups", "monitors"),
    [
        ((WHOLE,), {"mode": "existing"}, ["tessera-dcgm.rules"], 0),
        ((WHOLE,), {"mode": "existing", "dcgmExporter": False}, [], 0),
        ((SHARED,), {"mode": "existing", "dcgmExporter": False}, ["tessera.rules"], 3),
    ],
    ids=["nvidia-only", "nothing-to-alert-on", "shared-without-dcgm"],
)
def test_rules_and_monitors_follow_what_the_stack_runs(pools: tuple[dict[str, Any], ...], monitoring: dict[str, Any], groups: list[str], monitors: int) -> None:
    objects = _monitoring(stack(*pools, monitoring=monitoring))
    assert [g["name"] for r in _of(objects, "PrometheusRule") for g in r["spec"]["groups"]] == groups
    assert len(_of(objects, "ServiceMonitor")) == monitors


def test_dashboards_configmap_is_labelled_for_the_sidecar_and_holds_the_dashboard() -> None:
    config = stack(SHARED, monitoring={"mode": "existing", "dashboards": {"label": "grafana_dashboard", "labelValue": "tessera", "namespace": "grafana"}})
    (cm,) = _of(_monitoring(config), "ConfigMap")
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "tessera"
    board = json.loads(cm["data"][f"{UID}.json"])
    assert board["uid"] == UID and board["panels"]


def test_kube_prometheus_stack_release_namespace_and_values() -> None:
    config = stack(SHARED, WHOLE, monitoring={**KPS, "kubePrometheusStack": {**KPS["kubePrometheusStack"], "retention": "7d", "storageSizeGiB": 20}})
    release = helm_releases(config)["kube-prometheus-stack"]
    assert list(helm_releases(config))[0] == "kube-prometheus-stack"  # its CRDs before gpu-operator's ServiceMonitor
    assert (release.chart, release.version, release.namespace) == ("kube-prometheus-stack", "67.8.0", "monitoring")
    values = release.values
    assert values["prometheus"]["prometheusSpec"]["retention"] == "7d"
    assert values["prometheus"]["prometheusSpec"]["storageSpec"]["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert values["grafana"]["admin"]["existingSecret"] == "tessera-grafana-admin"
    assert values["grafana"]["sidecar"]["dashboards"] == {"enabled": True, "label": "grafana_dashboard", "labelValue": "1", "searchNamespace": "ALL"}
    assert "adminPassword" not in values["grafana"]
    namespace = next(o for o in build_stack(config)["platform"] if o["kind"] == "Namespace" and o["metadata"]["name"] == "monitoring")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"  # node-exporter


def test_render_writes_the_release_and_the_monitoring_objects() -> None:
    files = render_files(stack(SHARED, WHOLE, monitoring=KPS), "Pulumi.t.yaml")
    assert {"kube-prometheus-stack/values.yaml", "kube-prometheus-stack/release.yaml"} <= set(files)
    monitoring_file = next(f for f in files if f.endswith("-monitoring.yaml"))
    for kind in ("ServiceMonitor", "PrometheusRule", "ConfigMap"):
        assert f"kind: {kind}" in files[monitoring_file]
    assert "helm upgrade --install kube-prometheus-stack kube-prometheus-stack" in files["kube-prometheus-stack/release.yaml"]
