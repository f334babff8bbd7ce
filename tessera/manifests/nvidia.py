"""NVIDIA GPU operator for nvidia, mig and timeslice pools: Helm chart values and the two
ConfigMaps the operator reads (device plugin configs, mig-parted configs).

The driver is left to TKE (installed through the node pool's gpu_args); the operator brings the
container toolkit, its device plugin, mig-manager, GPU feature discovery and dcgm-exporter. Which
nodes run what is decided by node labels the node pools set (`tessera.dev/pool`,
`nvidia.com/mig.config`, `nvidia.com/device-plugin.config`, and
`nvidia.com/gpu.deploy.device-plugin=false` on shared pools, where Tessera's plugin serves).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from tessera.model.stack import StackConfig
from tessera.model.contract import TAINT_GPU
from tessera.manifests.nvidia_layouts import (
    DEFAULT_DEVICE_PLUGIN_CONFIG,
    MIG_DISABLED_CONFIG,
    cluster_mig_strategy,
    device_plugin_config_name,
    device_plugin_document,
    device_plugin_entries,
    layout_config_name,
    mig_config_name,
    mig_layout_entries,
    mig_parted_document,
    needs_gpu_operator,
    pools_with_mig_capable_gpus,
)
from tessera.manifests.objects import KubeObject, config_map, metadata, obj

COMPONENT: Final = "nvidia"
RELEASE_NAME: Final = "gpu-operator"
CHART: Final = "gpu-operator"
DEVICE_PLUGIN_CONFIGMAP: Final = "tessera-device-plugin-config"
MIG_PARTED_CONFIGMAP: Final = "tessera-mig-parted-config"
MIG_PARTED_KEY: Final = "config.yaml"
# gpu-operator's own taint key on GPU nodes (kept tolerated: nodes may carry it from other setups)
NVIDIA_GPU_TAINT: Final = "nvidia.com/gpu"

__all__ = [
    "DEVICE_PLUGIN_CONFIGMAP",
    "MIG_PARTED_CONFIGMAP",
    "GpuOperatorChart",
    "build_nvidia_objects",
    "device_plugin_config_name",
    "gpu_operator_chart",
    "layout_config_name",
    "mig_config_name",
]


@dataclass(frozen=True)
class GpuOperatorChart:
    """Everything a Helm release of gpu-operator needs (Pulumi `helm.v4.Chart` or `helm install`)."""

    version: str
    namespace: str
    values: dict[str, Any] = field(default_factory=dict)
    release_name: str = RELEASE_NAME
    repo: str = "https://helm.ngc.nvidia.com/nvidia"
    chart: str = CHART

    def helm_command(self) -> str:
        """The equivalent CLI, for docs and GitOps users (values in a file named values.yaml)."""
        return (
            f"helm upgrade --install {self.release_name} {self.chart} --repo {self.repo} "
            f"--version {self.version} --namespace {self.namespace} -f values.yaml"
        )


def _tolerations() -> list[dict[str, str]]:
    return [
        {"key": TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"},
        {"key": NVIDIA_GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    ]


def _nfd_worker_tolerations() -> list[dict[str, str]]:
    # The chart's defaults (control-plane nodes) plus ours: NFD must label GPU nodes or the
    # operator never sees them (its operands select on nvidia.com/gpu.present).
    return [
        {"key": "node-role.kubernetes.io/master", "operator": "Equal", "value": "", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "", "effect": "NoSchedule"},
        *_tolerations(),
    ]


def gpu_operator_values(config: StackConfig) -> dict[str, Any]:
    """Chart values (keys as in gpu-operator's deployments/gpu-operator/values.yaml, v24.x)."""
    operator = config.gpu_operator
    monitoring = config.monitoring
    mig_manager = bool(pools_with_mig_capable_gpus(config))
    return {
        "nfd": {"enabled": True},
        "node-feature-discovery": {"worker": {"tolerations": _nfd_worker_tolerations()}},
        "operator": {"defaultRuntime": "containerd"},
        "daemonsets": {"tolerations": _tolerations()},
        "driver": {"enabled": operator.install_driver},
        "toolkit": {"enabled": operator.install_toolkit},
        "mig": {"strategy": cluster_mig_strategy(config)},
        "devicePlugin": {
            "enabled": True,
            "config": {"create": False, "name": DEVICE_PLUGIN_CONFIGMAP, "default": DEFAULT_DEVICE_PLUGIN_CONFIG},
        },
        "migManager": {
            "enabled": mig_manager,
            "config": {"create": False, "name": MIG_PARTED_CONFIGMAP, "default": MIG_DISABLED_CONFIG},
        },
        "dcgmExporter": {
            "enabled": monitoring.dcgm_exporter,
            # honorLabels keeps dcgm-exporter's own namespace/pod/container (the pod holding the GPU)
            # instead of renaming them exported_*; the labels let the stack's Prometheus select it
            "serviceMonitor": {
                "enabled": monitoring.dcgm_exporter and monitoring.operator,
                "interval": f"{monitoring.scrape_interval_seconds}s",
                "honorLabels": True,
                "additionalLabels": monitoring.object_labels(),
            },
        },
    }


def gpu_operator_chart(config: StackConfig) -> GpuOperatorChart | None:
    """The gpu-operator release, or None when the stack does not need it (only shared pools and
    no dcgm-exporter) or `gpuOperator.enabled` is false."""
    if not needs_gpu_operator(config):
        return None
    return GpuOperatorChart(
        version=config.gpu_operator.chart_version,
        namespace=config.gpu_operator.namespace,
        values=gpu_operator_values(config),
        repo=config.gpu_operator.chart_repository,
    )


def _yaml(document: dict[str, Any]) -> str:
    text: str = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    return text


def _namespace(name: str) -> KubeObject:
    # The operator's operands (toolkit, mig-manager, device plugin) are privileged host agents.
    labels = {"kubernetes.io/metadata.name": name, "pod-security.kubernetes.io/enforce": "privileged"}
    return obj("v1", "Namespace", metadata(name, COMPONENT, namespace=None, extra_labels=labels))


def build_nvidia_objects(config: StackConfig) -> list[KubeObject]:
    """The operator's namespace and the ConfigMaps its chart values point at ([] when not needed)."""
    if not needs_gpu_operator(config):
        return []
    namespace = config.gpu_operator.namespace
    strategy = cluster_mig_strategy(config)
    plugin_data = {e.name: _yaml(device_plugin_document(e, strategy)) for e in device_plugin_entries(config)}
    mig_data = {MIG_PARTED_KEY: _yaml(mig_parted_document(mig_layout_entries(config)))}
    # The operator may share Tessera's namespace; "platform" creates that one (also privileged),
    # and two components owning one Namespace would make Pulumi and kubectl fight over it.
    own_namespace = [_namespace(namespace)] if namespace != config.namespace else []
    return [
        *own_namespace,
        config_map(DEVICE_PLUGIN_CONFIGMAP, COMPONENT, plugin_data, namespace),
        config_map(MIG_PARTED_CONFIGMAP, COMPONENT, mig_data, namespace),
    ]
