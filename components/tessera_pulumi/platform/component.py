"""`TesseraPlatform`: applies the in-cluster objects of one stack through a Kubernetes provider.

A thin adapter over the pure builders (`tessera.manifests.stack`): each component's objects become
one yaml v2 `ConfigGroup`, each Helm release (kube-prometheus-stack, gpu-operator,
prometheus-adapter) one helm v4 `Chart`. Grafana's admin password, a Pulumi secret, becomes a
typed `Secret` in the monitoring namespace before kube-prometheus-stack installs (`tessera_pulumi.platform.grafana`). The two webhook objects the webhook writes at runtime (its TLS Secret's `data`, its
configuration's `caBundle`) are typed resources with `ignore_changes` instead (tessera_pulumi.platform.webhook).
The Kubernetes provider arrives through `opts.provider` (built by the caller from the cluster's
kubeconfig or the `existing` kubeconfig) and is passed on to every child explicitly; nothing here
creates one.

Dependencies: everything waits for "platform" (namespaces, priority classes, pools ConfigMap);
kube-prometheus-stack waits for Grafana's admin Secret; gpu-operator waits for "nvidia" (its
namespace and the ConfigMaps its values name) and for kube-prometheus-stack (the CRD of its
dcgm-exporter ServiceMonitor); the webhook's workloads wait for its TLS Secret, and its
MutatingWebhookConfiguration waits for them (the API server calls the webhook only once it is
ready); "monitoring" waits for the workloads it scrapes and for kube-prometheus-stack's CRDs;
"workloads" (the stack's inference services) waits for everything else: the scheduler and the
webhook's configuration (a GPU pod admitted before it would miss its allocation env), the device
plugins, prometheus-adapter (the HPA's metric) and the PodMonitor CRD.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pulumi
from pulumi_kubernetes.admissionregistration.v1 import MutatingWebhookConfiguration
from pulumi_kubernetes.core.v1 import Secret
from pulumi_kubernetes.helm.v4 import Chart, ChartArgs, RepositoryOptsArgs
from pulumi_kubernetes.yaml.v2 import ConfigGroup

from tessera.model.stack import StackConfig
from tessera_pulumi.platform import grafana as typed_grafana
from tessera_pulumi.platform import webhook as typed_webhook
from tessera.manifests.objects import KubeObject
from tessera.manifests.stack import HelmRelease, build_stack, helm_releases

TYPE_NAME: Final = "tessera:index:TesseraPlatform"
GPU_OPERATOR: Final = "gpu-operator"
PROMETHEUS_ADAPTER: Final = "prometheus-adapter"
KUBE_PROMETHEUS_STACK: Final = "kube-prometheus-stack"  # the chart; the release name is the stack's
WEBHOOK: Final = "webhook"
WEBHOOK_CONFIGURATION: Final = "webhook-configuration"
WORKLOADS: Final = "workloads"
GRAFANA_ADMIN: Final = "grafana-admin"
# the group a chart waits for (by chart name); it is created right after that group
CHART_AFTER: Final = {GPU_OPERATOR: "nvidia", PROMETHEUS_ADAPTER: "platform", KUBE_PROMETHEUS_STACK: "platform"}


def _depends_on(component: str, created: dict[str, pulumi.Resource]) -> list[pulumi.Resource]:
    """Which already-created groups this component must wait for."""
    wanted: list[str] = []
    if component != "platform":
        wanted.append("platform")
    if component in CHART_AFTER:
        wanted.append(CHART_AFTER[component])
    if component == KUBE_PROMETHEUS_STACK:
        wanted.append(GRAFANA_ADMIN)
    if component == GPU_OPERATOR:
        wanted.append(KUBE_PROMETHEUS_STACK)
    if component == "monitoring":
        wanted += ["extender", "node", "webhook", GPU_OPERATOR, KUBE_PROMETHEUS_STACK]
    if component == WORKLOADS:
        wanted += [
            "nvidia", "extender", "scheduler", "node", WEBHOOK, WEBHOOK_CONFIGURATION, "repartition", "monitoring",
            GPU_OPERATOR, KUBE_PROMETHEUS_STACK, PROMETHEUS_ADAPTER,
        ]
    return [created[c] for c in dict.fromkeys(wanted) if c in created]


class TesseraPlatform(pulumi.ComponentResource):
    """Everything Tessera runs inside the cluster for one stack (see docs/deployment.md)."""

    config_groups: dict[str, ConfigGroup]
    charts: dict[str, Chart]
    gpu_operator: Chart | None
    prometheus_adapter: Chart | None
    kube_prometheus_stack: Chart | None
    grafana_admin_secret: Secret | None
    webhook_tls_secret: Secret | None
    webhook_configuration: MutatingWebhookConfiguration | None

    def __init__(
        self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None, secrets: Mapping[str, Any] | None = None
    ) -> None:
        """`secrets`: the engine's config values (`__main__.py` reads them); Grafana's admin password
        is the `tessera:<monitoring.kubePrometheusStack.grafana.adminPasswordSecret>` entry."""
        super().__init__(TYPE_NAME, name, None, opts)
        self._name = name
        self._provider = opts.provider if opts is not None else None
        self._created: dict[str, pulumi.Resource] = {}
        self.config_groups = {}
        self.charts = {}
        self.webhook_tls_secret = None
        self.webhook_configuration = None
        self.grafana_admin_secret = None

        releases = helm_releases(config)
        for component, objects in build_stack(config).items():
            if component == WORKLOADS:
                self._remaining_charts(releases)  # the workloads wait for every chart
            if component == WEBHOOK:
                self._webhook(objects)
            else:
                self._group(component, objects, self._child(component))
            if component == "platform":
                self._grafana_admin(config, secrets or {})
            for release in releases.values():
                if CHART_AFTER.get(release.chart) == component:
                    self._chart(release)
        self._remaining_charts(releases)
        self.gpu_operator = self.charts.get(GPU_OPERATOR)
        self.prometheus_adapter = self.charts.get(PROMETHEUS_ADAPTER)
        self.kube_prometheus_stack = self.charts.get(KUBE_PROMETHEUS_STACK)

        self.register_outputs(
            {
                "components": sorted(self.config_groups),
                "charts": {r.chart: r.version for r in releases.values()},
                "gpuOperator": releases[GPU_OPERATOR].version if GPU_OPERATOR in releases else None,
            }
        )

    def _child(self, component: str, extra: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        depends = _depends_on(component, self._created) + list(extra or [])
        return pulumi.ResourceOptions(parent=self, provider=self._provider, depends_on=depends)

    def _group(self, component: str, objects: list[KubeObject], opts: pulumi.ResourceOptions) -> ConfigGroup:
        group = ConfigGroup(f"{self._name}-{component}", objs=objects, opts=opts)
        self.config_groups[component] = group
        self._created[component] = group
        return group

    def _webhook(self, objects: list[KubeObject]) -> None:
        """Secret first (the replicas read it at start), then the workloads, then the configuration."""
        runtime_written = {o["kind"]: o for o in objects if typed_webhook.is_runtime_written(o)}
        secret, hooks = runtime_written.get("Secret"), runtime_written.get("MutatingWebhookConfiguration")
        before: list[pulumi.Resource] = []
        if secret is not None:
            self.webhook_tls_secret = typed_webhook.tls_secret(f"{self._name}-webhook-tls", secret, self._child(WEBHOOK))
            before.append(self.webhook_tls_secret)
        rest = [o for o in objects if not typed_webhook.is_runtime_written(o)]
        group = self._group(WEBHOOK, rest, self._child(WEBHOOK, before))
        if hooks is not None:
            self.webhook_configuration = typed_webhook.webhook_configuration(
                f"{self._name}-webhook-configuration", hooks, self._child(WEBHOOK, [group])
            )
            self._created[WEBHOOK_CONFIGURATION] = self.webhook_configuration

    def _grafana_admin(self, config: StackConfig, secrets: Mapping[str, Any]) -> None:
        secret = typed_grafana.admin_secret(f"{self._name}-{GRAFANA_ADMIN}", config, secrets, self._child(GRAFANA_ADMIN))
        if secret is not None:
            self.grafana_admin_secret = secret
            self._created[GRAFANA_ADMIN] = secret

    def _remaining_charts(self, releases: Mapping[str, HelmRelease]) -> None:
        """Charts whose group the stack does not have, not created yet."""
        for release in releases.values():
            if release.chart not in self.charts:
                self._chart(release)

    def _chart(self, release: HelmRelease) -> Chart:
        chart = Chart(
            f"{self._name}-{release.name}",
            ChartArgs(
                chart=release.chart,
                version=release.version,
                namespace=release.namespace,
                name=release.name,
                repository_opts=RepositoryOptsArgs(repo=release.repository),
                values=release.values,
            ),
            opts=self._child(release.chart),
        )
        self.charts[release.chart] = chart
        self._created[release.chart] = chart
        return chart
