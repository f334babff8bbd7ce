"""What `monitoring` deploys, as lines for `tessera plan` (pure, over a validated StackConfig)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig

KUBE_PROMETHEUS_STACK: Final = "kube-prometheus-stack"
# the jobs the ServiceMonitors create (tessera.monitoring.alerts names the same)
TESSERA_JOBS: Final = ("tessera-extender", "tessera-node-agent", "tessera-device-plugin", "tessera-webhook")


def monitoring_lines(cfg: StackConfig) -> tuple[str, ...]:
    m = cfg.monitoring
    if not m.enabled:
        return ("off: no scrape annotations, metrics ports closed to Prometheus",)
    shared = any(p.kind == "shared" for p in cfg.node_pools)
    if m.mode == "none":
        return ("mode none: /metrics with prometheus.io/* annotations only (no ServiceMonitor, alert or dashboard)",)
    lines: list[str] = []
    if m.mode == "kube-prometheus-stack":
        kps = m.kube_prometheus_stack
        parts = ["Prometheus", *(["Alertmanager"] if kps.alertmanager else []), *(["Grafana"] if kps.grafana.enabled else [])]
        storage = f"{kps.storage_size_gib}GiB volume" if kps.storage_size_gib else "emptyDir"
        lines.append(f"{KUBE_PROMETHEUS_STACK} {kps.chart_version} as release {kps.release_name} in namespace {kps.namespace}: {', '.join(parts)}")
        lines.append(f"retention {kps.retention}" + (f" or {kps.retention_size}" if kps.retention_size else "") + f", {storage}")
    else:
        lines.append("mode existing: objects for the cluster's Prometheus Operator")
    labels = ", ".join(f"{k}={v}" for k, v in m.object_labels().items()) or "none"
    scraped = [*(TESSERA_JOBS if shared else ()), *(["dcgm-exporter (gpu-operator's ServiceMonitor)"] if m.dcgm_exporter and cfg.gpu_operator.enabled else [])]
    lines.append(f"scrapes every {m.scrape_interval_seconds}s: {', '.join(scraped) or 'nothing (no shared pool, no dcgm-exporter)'}; selector labels: {labels}")
    a = m.alerts
    if a.enabled:
        lines.append(
            f"alerts: pool allocation > {a.pool_allocation_percent:g}%, stranded > {a.stranded_share_percent:g}%, offline paused > {a.offline_paused_minutes}m, "
            f"extender p99 > {a.extender_p99_seconds:g}s or errors > {a.extender_error_percent:g}%; GPU health, Xid, over-commit, components down"
        )
    d = m.dashboards
    if d.enabled:
        lines.append(f"dashboards: ConfigMap tessera-dashboards in {d.namespace or cfg.namespace}, label {d.label}={d.label_value}")
    return tuple(lines)
