"""Metrics the device plugin serves (`--metrics-port`, 9501): registration with kubelet, GPU health,
container starts.

Names, types, labels and meaning are a contract with Prometheus, the dashboards and the alerts;
`tessera_node.deviceplugin.metrics` fills them. Series carry no node label: Prometheus adds it
from the target (the ServiceMonitor relabels `node` from the pod's node name).
"""
from __future__ import annotations

from typing import Final

from tessera.model.metrics.spec import MetricSpec

REGISTERED: Final = MetricSpec(
    "tessera_device_plugin_registered", "gauge", "1 while the plugin is registered with this node's kubelet and serving its socket", ("resource",)
)
REGISTRATIONS: Final = MetricSpec("tessera_device_plugin_registrations", "counter", "Register calls to kubelet, by result (ok, error)", ("resource", "result"))
PAUSED: Final = MetricSpec("tessera_device_plugin_paused", "gauge", "1 while the plugin stepped aside for gpu-operator's MIG change (node label paused-for-mig-change)")
GPUS: Final = MetricSpec("tessera_device_plugin_gpus", "gauge", "GPUs the plugin advertises to kubelet, by health (healthy, unhealthy)", ("health",))
CONTAINER_STARTS: Final = MetricSpec(
    "tessera_device_plugin_container_starts", "counter", "PreStartContainer checks, by result (accepted, rejected: the container is not started)", ("result",)
)
METRICS: Final = (REGISTERED, REGISTRATIONS, PAUSED, GPUS, CONTAINER_STARTS)
