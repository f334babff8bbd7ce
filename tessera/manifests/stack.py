"""Every in-cluster object of one stack, grouped by component: the one entry point for Pulumi and render.

`build_stack(config)` is pure: the same config gives the same objects in the same order, so
`tessera render` is byte-stable and Pulumi previews show only real changes. `COMPONENT_ORDER` is
the apply order of the rendered files; Pulumi applies the same groups with explicit dependencies
(`tessera_pulumi.platform`).
The Helm charts (kube-prometheus-stack, gpu-operator, prometheus-adapter) are not lists of objects: `helm_releases(config)`
describes them, Pulumi installs each with helm v4 `Chart`, `tessera render` writes each one's
values file and release description into a directory named after the release.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tessera.manifests import (
    dra,
    extender,
    kube_prometheus_stack,
    monitoring,
    network,
    node,
    nvidia,
    platform,
    prometheus_adapter,
    repartition,
    scheduler,
    webhook,
    workloads,
)
from tessera.manifests.objects import KubeObject, sorted_objects
from tessera.manifests.settings import PlatformSettings, platform_settings

if TYPE_CHECKING:
    from tessera.model.stack import StackConfig

# Apply order. "platform" (namespace, priority classes, pools ConfigMap, quotas) comes first;
# "monitoring" after the components because its ServiceMonitors and PrometheusRule need prometheus-operator's CRDs;
# "workloads" (the stack's inference services) last: their pods need the scheduler, the webhook and
# the device plugins in place, and their PodMonitors the same CRDs.
COMPONENT_ORDER: Final = ("platform", "nvidia", "extender", "scheduler", "node", "webhook", "repartition", "monitoring", "workloads")


@dataclass(frozen=True)
class HelmRelease:
    """A Helm chart to install: what Pulumi's helm v4 `Chart` and `helm upgrade --install` need."""

    name: str
    chart: str
    version: str
    repository: str
    namespace: str
    values: dict[str, Any]

    def helm_command(self, values_file: str) -> str:
        """The equivalent helm CLI invocation for kubectl/GitOps users."""
        return (
            f"helm upgrade --install {self.name} {self.chart} --repo {self.repository} --version {self.version} "
            f"--namespace {self.namespace} --create-namespace --values {values_file}"
        )


def _sharing_components(settings: PlatformSettings) -> dict[str, list[KubeObject]]:
    policies = network.build_network_policies(settings)
    return {
        "platform": platform.build_platform_objects(settings),
        "extender": extender.build_extender_objects(settings) + policies.get(extender.COMPONENT, []),
        "scheduler": scheduler.build_scheduler_objects(settings) + policies.get(scheduler.COMPONENT, []),
        "node": node.build_node_objects(settings) + dra.build_dra_objects(settings) + policies.get(node.COMPONENT, []),
    }


def _nvidia_components(config: StackConfig) -> dict[str, list[KubeObject]]:
    # NVIDIA-pool objects (device plugin configs, mig-parted), scheduled re-partitioning and the
    # admission webhook have their own builders; they read the stack config directly.
    return {
        "nvidia": list(nvidia.build_nvidia_objects(config)),
        "repartition": list(repartition.build_repartition_objects(config)),
        "webhook": list(webhook.build_webhook_objects(config)),
        "monitoring": monitoring.build_monitoring_objects(config),
        "workloads": workloads.build_workload_objects(config),
    }


def build_stack(config: StackConfig) -> dict[str, list[KubeObject]]:
    """Component name -> its objects in apply order. Components with no objects are left out."""
    settings = platform_settings(config)
    groups = {**_sharing_components(settings), **_nvidia_components(config)}
    if any(o["kind"] == "Deployment" for o in groups["webhook"]):
        groups["webhook"].append(network.webhook_network_policy(settings))
    # namespaces the workloads ask for come with Tessera's, before the quotas that may live in them
    groups["platform"] = groups["platform"] + workloads.workload_namespaces(config)
    out: dict[str, list[KubeObject]] = {}
    for name in COMPONENT_ORDER:
        objects = groups.get(name, [])
        if objects:
            out[name] = sorted_objects(objects)
    return out


def gpu_operator_release(config: StackConfig) -> HelmRelease | None:
    """The gpu-operator chart with this stack's values, or None when no pool needs it."""
    return _release(nvidia.gpu_operator_chart(config))


def prometheus_adapter_release(config: StackConfig) -> HelmRelease | None:
    """prometheus-adapter with the queue-time rule, or None unless the stack asks for it."""
    return _release(prometheus_adapter.prometheus_adapter_chart(config))


def kube_prometheus_stack_release(config: StackConfig) -> HelmRelease | None:
    """kube-prometheus-stack with this stack's values, or None unless `monitoring.mode` asks for it."""
    m = config.monitoring
    if m.mode != "kube-prometheus-stack" or not m.enabled:
        return None
    kps = m.kube_prometheus_stack
    return HelmRelease(
        name=kps.release_name,
        chart=kube_prometheus_stack.CHART,
        version=kps.chart_version,
        repository=kps.chart_repository,
        namespace=kps.namespace,
        values=kube_prometheus_stack.kube_prometheus_stack_values(config),
    )


def _release(chart: nvidia.GpuOperatorChart | prometheus_adapter.PrometheusAdapterChart | None) -> HelmRelease | None:
    if chart is None:
        return None
    return HelmRelease(
        name=chart.release_name,
        chart=chart.chart,
        version=chart.version,
        repository=chart.repo,
        namespace=chart.namespace,
        values=dict(chart.values),
    )


def helm_releases(config: StackConfig) -> dict[str, HelmRelease]:
    """Release name -> release, in install order, only those the stack needs. kube-prometheus-stack
    comes first: its CRDs must exist before gpu-operator's dcgm-exporter ServiceMonitor."""
    found = (kube_prometheus_stack_release(config), gpu_operator_release(config), prometheus_adapter_release(config))
    return {r.name: r for r in found if r is not None}
