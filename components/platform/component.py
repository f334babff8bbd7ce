"""`TesseraPlatform`: applies the in-cluster objects of one stack through a Kubernetes provider.

A thin adapter over the pure builders (`tessera.manifests.stack`): each component's objects become
one yaml v2 `ConfigGroup`, the gpu-operator release one helm v4 `Chart`. The Kubernetes provider
arrives through `opts.provider` (built by the caller from the cluster's kubeconfig or the
`existing` kubeconfig) and is passed on to every child explicitly; nothing here creates one.

Dependencies: every group waits for "platform" (namespace, priority classes, pools ConfigMap);
the chart waits for "nvidia" (its namespace and the ConfigMaps its values name); "monitoring"
waits for the workloads it scrapes.
"""
from __future__ import annotations

from typing import Final

import pulumi
from pulumi_kubernetes.helm.v4 import Chart, ChartArgs, RepositoryOptsArgs
from pulumi_kubernetes.yaml.v2 import ConfigGroup

from components.config.stack import StackConfig
from tessera.manifests.stack import HelmRelease, build_stack, gpu_operator_release

TYPE_NAME: Final = "tessera:index:TesseraPlatform"
GPU_OPERATOR: Final = "gpu-operator"


def _depends_on(component: str, created: dict[str, pulumi.Resource]) -> list[pulumi.Resource]:
    """Which already-created groups this component must wait for."""
    wanted: list[str] = []
    if component != "platform":
        wanted.append("platform")
    if component == GPU_OPERATOR:
        wanted.append("nvidia")
    if component == "monitoring":
        wanted += ["extender", "node", GPU_OPERATOR]
    return [created[c] for c in wanted if c in created]


class TesseraPlatform(pulumi.ComponentResource):
    """Everything Tessera runs inside the cluster for one stack (see docs/deployment.md)."""

    config_groups: dict[str, ConfigGroup]
    gpu_operator: Chart | None

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_NAME, name, None, opts)
        provider = opts.provider if opts is not None else None
        created: dict[str, pulumi.Resource] = {}
        self.config_groups = {}
        self.gpu_operator = None

        def child(component: str) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, provider=provider, depends_on=_depends_on(component, created))

        groups = build_stack(config)
        release = gpu_operator_release(config)
        for component, objects in groups.items():
            group = ConfigGroup(f"{name}-{component}", objs=objects, opts=child(component))
            self.config_groups[component] = group
            created[component] = group
            if component == "nvidia" and release is not None:
                self.gpu_operator = self._chart(name, release, child(GPU_OPERATOR))
                created[GPU_OPERATOR] = self.gpu_operator
        if release is not None and self.gpu_operator is None:  # a release without NVIDIA objects
            self.gpu_operator = self._chart(name, release, child(GPU_OPERATOR))

        self.register_outputs(
            {
                "components": sorted(self.config_groups),
                "gpuOperator": release.version if release is not None else None,
            }
        )

    @staticmethod
    def _chart(name: str, release: HelmRelease, opts: pulumi.ResourceOptions) -> Chart:
        return Chart(
            f"{name}-{GPU_OPERATOR}",
            ChartArgs(
                chart=release.chart,
                version=release.version,
                namespace=release.namespace,
                name=release.name,
                repository_opts=RepositoryOptsArgs(repo=release.repository),
                values=release.values,
            ),
            opts=opts,
        )
