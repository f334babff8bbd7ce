"""Cross-field rules of the `monitoring` section; each returns Problems with full config paths."""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tessera.model.monitoring import MonitoringConfig
from tessera.model.platform import GpuOperatorConfig, SchedulerConfig
from tessera.model.problems import Problem, at


class MonitoredStack(Protocol):
    """The parts of a stack config these rules read (`StackConfig` is one); a protocol, so the
    rules never import the stack model that calls them."""

    @property
    def namespace(self) -> str: ...
    @property
    def gpu_operator(self) -> GpuOperatorConfig: ...
    @property
    def scheduler(self) -> SchedulerConfig: ...
    @property
    def monitoring(self) -> MonitoringConfig: ...

_OPERATOR_ONLY = (("alerts", "alerts"), ("dashboards", "dashboards"), ("selector_labels", "selectorLabels"))


def _mode_problems(cfg: MonitoredStack) -> list[Problem]:
    m = cfg.monitoring
    out: list[Problem] = []
    if m.mode == "none":
        for field, key in _OPERATOR_ONLY:
            if m.user_set(field):
                out.append(Problem(at("monitoring", key), "only applies with mode kube-prometheus-stack or existing; mode none deploys no PrometheusRule, dashboard or ServiceMonitor (set mode, or remove this key)"))
    if m.mode != "kube-prometheus-stack" and m.user_set("kube_prometheus_stack"):
        out.append(Problem(at("monitoring", "kubePrometheusStack"), f"only applies with mode kube-prometheus-stack (mode is {m.mode})"))
    if m.mode != "none" and not m.enabled:
        out.append(Problem(at("monitoring", "enabled"), f"false closes the metrics ports to Prometheus, which mode {m.mode} scrapes; use mode none to deploy nothing for Prometheus"))
    return out


def _stack_problems(cfg: MonitoredStack, is_stack_key: Callable[[str], bool]) -> list[Problem]:
    kps = cfg.monitoring.kube_prometheus_stack
    base = ("monitoring", "kubePrometheusStack")
    out: list[Problem] = []
    taken = {cfg.namespace: "namespace"}
    if cfg.gpu_operator.enabled:
        taken.setdefault(cfg.gpu_operator.namespace, "gpuOperator.namespace")
    if kps.namespace in taken:
        out.append(Problem(at(*base, "namespace"), f"{kps.namespace!r} is also {taken[kps.namespace]}; give the monitoring stack its own namespace, e.g. monitoring"))
    if kps.storage_class is not None and kps.storage_size_gib is None:
        out.append(Problem(at(*base, "storageClass"), "only applies with storageSizeGiB (without it Prometheus keeps its data in an emptyDir)"))
    grafana = kps.grafana
    secret = grafana.admin_password_secret
    if grafana.enabled and secret is None:
        out.append(Problem(
            at(*base, "grafana", "adminPasswordSecret"),
            "is required with Grafana on (the chart's built-in password is public): name a Pulumi secret, e.g. grafanaAdminPassword, "
            "and set it with pulumi config set --secret tessera:grafanaAdminPassword <password>",
        ))
    elif secret is not None and is_stack_key(secret):
        out.append(Problem(at(*base, "grafana", "adminPasswordSecret"), f"{secret!r} is a Tessera setting; name the secret something else, e.g. grafanaAdminPassword"))
    elif secret is not None and not grafana.enabled:
        out.append(Problem(at(*base, "grafana", "adminPasswordSecret"), "only applies with grafana.enabled: true"))
    return out


def monitoring_problems(cfg: MonitoredStack, is_stack_key: Callable[[str], bool]) -> list[Problem]:
    """Every cross-field problem of `monitoring` (the dcgm-exporter/operator rule lives in rules.py)."""
    m = cfg.monitoring
    out = _mode_problems(cfg)
    if m.mode == "kube-prometheus-stack":
        out += _stack_problems(cfg, is_stack_key)
    if m.metrics_port == m.device_plugin_metrics_port:
        out.append(Problem(at("monitoring", "devicePluginMetricsPort"), f"{m.device_plugin_metrics_port} is also metricsPort; the device plugin and the node agent share a pod and need two ports"))
    timeout = cfg.scheduler.http_timeout_seconds
    if m.alerts.extender_p99_seconds >= timeout:
        out.append(Problem(
            at("monitoring", "alerts", "extenderP99Seconds"),
            f"{m.alerts.extender_p99_seconds}s is not below scheduler.httpTimeoutSeconds ({timeout}s): calls that slow time out first, so the alert would never fire",
        ))
    return out
