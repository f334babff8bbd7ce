"""What Prometheus and Grafana need from a stack: ServiceMonitors, a PrometheusRule, dashboards.

Deployed in modes `kube-prometheus-stack` and `existing` (prometheus-operator's CRDs must exist:
the chart brings them, or the cluster already has them), last in apply order. Every object
carries `monitoring.selectorLabels` (mode kube-prometheus-stack adds `release: <releaseName>`),
which is what a Prometheus's serviceMonitorSelector and ruleSelector match.

Scrape targets (dcgm-exporter is scraped through gpu-operator's own ServiceMonitor, which the
chart values in `tessera.manifests.nvidia` turn on with the same labels):

| job | Service, port | why this way |
| --- | --- | --- |
| tessera-extender | tessera-extender, http | the extender serves /metrics beside its verbs |
| tessera-node-agent | tessera-node-metrics, metrics | `honorLabels`: its per-container series carry the workload's namespace/pod/container |
| tessera-device-plugin | tessera-node-metrics, plugin-metrics | same pod as the agent, its own port |
| tessera-webhook | tessera-webhook, https | HTTPS, verified against the CA in the webhook's TLS Secret |

Each endpoint sets `job` to a fixed name (alerts and dashboards select on it) and `node` from
the pod's node, so per-node series need no join with kube-state-metrics.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from tessera.manifests import extender, node, webhook
from tessera.manifests.objects import KubeObject, config_map, metadata, obj, selector_labels
from tessera.monitoring.alerts import JOB_DEVICE_PLUGIN, JOB_EXTENDER, JOB_NODE_AGENT, JOB_WEBHOOK, Thresholds, alert_groups

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig

COMPONENT: Final = "monitoring"
RULE_NAME: Final = "tessera-alerts"
DASHBOARDS_CONFIGMAP: Final = "tessera-dashboards"
PLUGIN_METRICS_PORT_NAME: Final = "plugin-metrics"


def _relabelings(job: str) -> list[dict[str, Any]]:
    return [
        {"action": "replace", "targetLabel": "job", "replacement": job},
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"},
    ]


def _endpoint(port: str, job: str, interval: str, *, honor_labels: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"port": port, "path": "/metrics", "interval": interval, "relabelings": _relabelings(job)}
    if honor_labels:
        out["honorLabels"] = True
    return out


def _service_monitor(name: str, component: str, config: StackConfig, endpoints: list[dict[str, Any]]) -> KubeObject:
    return obj(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        metadata(name, COMPONENT, config.namespace, extra_labels=config.monitoring.object_labels()),
        spec={
            "selector": {"matchLabels": selector_labels(component, name)},
            "namespaceSelector": {"matchNames": [config.namespace]},
            "endpoints": endpoints,
        },
    )


def service_monitors(config: StackConfig) -> list[KubeObject]:
    """The extender, the node DaemonSet (agent + device plugin) and the webhook: shared pools only."""
    if not config.pools_of_kind("shared"):
        return []
    interval = f"{config.monitoring.scrape_interval_seconds}s"
    webhook_endpoint = _endpoint("https", JOB_WEBHOOK, interval)
    webhook_endpoint.update(
        scheme="https",
        tlsConfig={"ca": {"secret": {"name": webhook.TLS_SECRET, "key": "ca.crt"}}, "serverName": f"{webhook.NAME}.{config.namespace}.svc"},
    )
    return [
        _service_monitor(extender.NAME, extender.COMPONENT, config, [_endpoint("http", JOB_EXTENDER, interval)]),
        _service_monitor(
            node.NAME, node.COMPONENT, config,
            [_endpoint("metrics", JOB_NODE_AGENT, interval, honor_labels=True), _endpoint(PLUGIN_METRICS_PORT_NAME, JOB_DEVICE_PLUGIN, interval)],
        ),
        _service_monitor(webhook.NAME, webhook.COMPONENT, config, [webhook_endpoint]),
    ]


def thresholds(config: StackConfig) -> Thresholds:
    a = config.monitoring.alerts
    return Thresholds(
        pool_allocation_percent=a.pool_allocation_percent,
        stranded_share_percent=a.stranded_share_percent,
        offline_paused_minutes=a.offline_paused_minutes,
        extender_p99_seconds=a.extender_p99_seconds,
        extender_error_percent=a.extender_error_percent,
        runbook_url=a.runbook_url,
    )


def dcgm_scraped(config: StackConfig) -> bool:
    m = config.monitoring
    return m.operator and m.dcgm_exporter and config.gpu_operator.enabled


def prometheus_rule(config: StackConfig) -> list[KubeObject]:
    groups = alert_groups(thresholds(config), tessera=bool(config.pools_of_kind("shared")), dcgm=dcgm_scraped(config))
    if not groups:
        return []
    meta = metadata(RULE_NAME, COMPONENT, config.namespace, extra_labels=config.monitoring.object_labels())
    return [obj("monitoring.coreos.com/v1", "PrometheusRule", meta, spec={"groups": groups})]


def dashboard_configmap(config: StackConfig) -> KubeObject:
    from tessera.monitoring.dashboards import build_dashboards  # the SDK is only needed when dashboards are built

    d = config.monitoring.dashboards
    data = {f"{uid}.json": json.dumps(board, indent=1, sort_keys=True) + "\n" for uid, board in build_dashboards().items()}
    cm = config_map(DASHBOARDS_CONFIGMAP, COMPONENT, data, d.namespace or config.namespace)
    cm["metadata"]["labels"] = dict(sorted({**cm["metadata"]["labels"], d.label: d.label_value}.items()))
    return cm


def build_monitoring_objects(config: StackConfig) -> list[KubeObject]:
    """ServiceMonitors, the PrometheusRule and the dashboards ConfigMap ([] in mode none)."""
    m = config.monitoring
    if not m.operator:
        return []
    out = service_monitors(config)
    if m.alerts.enabled:
        out += prometheus_rule(config)
    if m.dashboards.enabled:
        out.append(dashboard_configmap(config))
    return out
