"""`TesseraPlatform`: applies the in-cluster objects of one stack through a Kubernetes provider.

A thin adapter over the pure builders (`tessera.manifests.stack`): each component's objects become
one yaml v2 `ConfigGroup`, each Helm release (gpu-operator, prometheus-adapter) one helm v4
`Chart`. The two webhook objects the webhook writes at runtime (its TLS Secret's `data`, its
configuration's `caBundle`) are typed resources with `ignore_changes` instead (tessera_pulumi.platform.webhook).
The Kubernetes provider arrives through `opts.provider` (built by the caller from the cluster's
kubeconfig or the `existing` kubeconfig) and is passed on to every child explicitly; nothing here
creates one.

Dependencies: everything waits for "platform" (namespace, priority classes, pools ConfigMap);
gpu-operator waits for "nvidia" (its namespace and the ConfigMaps its values name); the webhook's
workloads wait for its TLS Secret, and its MutatingWebhookConfiguration waits for them (the API
server calls the webhook only once it is ready); "monitoring" waits for the workloads it scrapes.
"""
from __future__ import annotations

from typing import Final

import pulumi
from pulumi_kubernetes.admissionregistration.v1 import MutatingWebhookConfiguration
from pulumi_kubernetes.core.v1 import Secret
from pulumi_kubernetes.helm.v4 import Chart, ChartArgs, RepositoryOptsArgs
from pulumi_kubernetes.yaml.v2 import ConfigGroup

from tessera.model.stack import StackConfig
from tessera_pulumi.platform import webhook as typed_webhook
from tessera.manifests.objects import KubeObject
from tessera.manifests.stack import HelmRelease, build_stack, helm_releases

TYPE_NAME: Final = "tessera:index:TesseraPlatform"
GPU_OPERATOR: Final = "gpu-operator"
PROMETHEUS_ADAPTER: Final = "prometheus-adapter"
WEBHOOK: Final = "webhook"
# the group a chart waits for; it is created right after that group
CHART_AFTER: Final = {GPU_OPERATOR: "nvidia", PROMETHEUS_ADAPTER: "platform"}


def _depends_on(component: str, created: dict[str, pulumi.Resource]) -> list[pulumi.Resource]:
    """Which already-created groups this component must wait for."""
    wanted: list[str] = []
    if component != "platform":
        wanted.append("platform")
    if component in CHART_AFTER:
        wanted.append(CHART_AFTER[component])
    if component == "monitoring":
        wanted += ["extender", "node", GPU_OPERATOR]
    return [created[c] for c in dict.fromkeys(wanted) if c in created]


class TesseraPlatform(pulumi.ComponentResource):
    """Everything Tessera runs inside the cluster for one stack (see docs/deployment.md)."""

    config_groups: dict[str, ConfigGroup]
    charts: dict[str, Chart]
    gpu_operator: Chart | None
    prometheus_adapter: Chart | None
    webhook_tls_secret: Secret | None
    webhook_configuration: MutatingWebhookConfiguration | None

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_NAME, name, None, opts)
        self._name = name
        self._provider = opts.provider if opts is not None else None
        self._created: dict[str, pulumi.Resource] = {}
        self.config_groups = {}
        self.charts = {}
        self.webhook_tls_secret = None
        self.webhook_configuration = None

        releases = helm_releases(config)
        for component, objects in build_stack(config).items():
            if component == WEBHOOK:
                self._webhook(objects)
            else:
                self._group(component, objects, self._child(component))
            for release in releases.values():
                if CHART_AFTER.get(release.name) == component:
                    self._chart(release)
        for release in releases.values():  # a chart whose group the stack does not have
            if release.name not in self.charts:
                self._chart(release)
        self.gpu_operator = self.charts.get(GPU_OPERATOR)
        self.prometheus_adapter = self.charts.get(PROMETHEUS_ADAPTER)

        self.register_outputs(
            {
                "components": sorted(self.config_groups),
                "charts": {n: r.version for n, r in releases.items()},
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
            opts=self._child(release.name),
        )
        self.charts[release.name] = chart
        self._created[release.name] = chart
        return chart
