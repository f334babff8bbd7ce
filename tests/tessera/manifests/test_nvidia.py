"""gpu-operator values and the device-plugin / mig-parted ConfigMaps, per pool kind."""
from __future__ import annotations

from typing import Any

import pytest
from nvidia_stack_helpers import configmap_yaml, find, pool, stack, validate_all

from tessera.model import StackConfig
from tessera.model import contract
from tessera.manifests.nvidia import (
    DEVICE_PLUGIN_CONFIGMAP,
    MIG_PARTED_CONFIGMAP,
    build_nvidia_objects,
    gpu_operator_chart,
)

MIG_MIXED = pool(
    "infer",
    "mig",
    "A100-40GB",
    mig={"strategy": "mixed", "profile": "all-balanced"},
    timeSlicing={"replicas": {"nvidia.com/mig-1g.5gb": 4, "nvidia.com/mig-3g.20gb": 2}},
    repartition=[
        {"name": "day", "cron": "0 8 * * *", "timezone": "Asia/Shanghai", "layout": "all-1g.5gb"},
        {"name": "night", "cron": "0 20 * * *", "timezone": "Asia/Shanghai", "layout": {"7g.40gb": 1}},
    ],
)
MIG_SINGLE = pool("slices", "mig", "A100-40GB", mig={"strategy": "single", "profile": "all-2g.10gb"}, timeSlicing={"replicas": {"nvidia.com/gpu": 3}})
TIMESLICE = pool(
    "t4",
    "timeslice",
    timeSlicing={"replicas": 4, "renameByDefault": True, "failRequestsGreaterThanOne": True},
    repartition=[{"cron": "0 8 * * 1-5", "layout": 4}, {"cron": "0 20 * * 1-5", "layout": 1}],
)
WHOLE = pool("whole", "nvidia")
SHARED = pool("frac", "shared")


def _plugin_configs(config: StackConfig) -> dict[str, Any]:
    cm = find(build_nvidia_objects(config), "ConfigMap", DEVICE_PLUGIN_CONFIGMAP)
    return {key: configmap_yaml(cm, key) for key in cm["data"]}


def _mig_configs(config: StackConfig) -> dict[str, Any]:
    cm = find(build_nvidia_objects(config), "ConfigMap", MIG_PARTED_CONFIGMAP)
    doc = configmap_yaml(cm, "config.yaml")
    assert doc["version"] == "v1"
    return dict(doc["mig-configs"])


def test_objects_are_schema_valid_and_in_the_operator_namespace() -> None:
    objects = build_nvidia_objects(stack(MIG_MIXED, TIMESLICE, WHOLE, SHARED, gpuOperator={"namespace": "gpu-op"}))
    validate_all(objects)
    assert {o["metadata"].get("namespace", "gpu-op") for o in objects} == {"gpu-op"}
    namespace = find(objects, "Namespace", "gpu-op")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_device_plugin_config_has_an_entry_per_pool_layout_and_a_default() -> None:
    configs = _plugin_configs(stack(MIG_MIXED, TIMESLICE, WHOLE, SHARED))
    assert sorted(configs) == ["default", "tessera-infer", "tessera-infer.0", "tessera-infer.1", "tessera-t4", "tessera-t4.0", "tessera-t4.1"]
    assert configs["default"] == {"version": "v1", "flags": {"migStrategy": "mixed"}}
    assert configs["tessera-infer"]["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/mig-1g.5gb", "replicas": 4},
        {"name": "nvidia.com/mig-3g.20gb", "replicas": 2},
    ]
    # the day layout has only 1g.5gb slices; the night layout (7g.40gb) is not time-sliced
    assert configs["tessera-infer.0"]["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-1g.5gb", "replicas": 4}]
    assert "sharing" not in configs["tessera-infer.1"]


def test_timeslice_pool_entries_follow_the_schedule_and_flags() -> None:
    configs = _plugin_configs(stack(TIMESLICE))
    ts = configs["tessera-t4"]["sharing"]["timeSlicing"]
    assert ts == {"renameByDefault": True, "failRequestsGreaterThanOne": True, "resources": [{"name": contract.NVIDIA_GPU, "replicas": 4}]}
    assert configs["tessera-t4.0"]["sharing"]["timeSlicing"]["resources"] == [{"name": contract.NVIDIA_GPU, "replicas": 4}]
    assert "sharing" not in configs["tessera-t4.1"]  # 1 replica at night: whole GPUs
    assert configs["tessera-t4"]["flags"]["migStrategy"] == "single"


def test_single_strategy_pool_keeps_nvidia_gpu_name_when_cluster_is_single() -> None:
    configs = _plugin_configs(stack(MIG_SINGLE))
    assert configs["tessera-slices"]["flags"]["migStrategy"] == "single"
    assert configs["tessera-slices"]["sharing"]["timeSlicing"]["resources"] == [{"name": contract.NVIDIA_GPU, "replicas": 3}]


def test_single_pool_in_a_mixed_cluster_gets_its_slices_under_the_profile_name() -> None:
    configs = _plugin_configs(stack(MIG_SINGLE, MIG_MIXED))
    entry = configs["tessera-slices"]
    assert entry["flags"]["migStrategy"] == "mixed"
    assert entry["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-2g.10gb", "replicas": 3}]


def test_mig_parted_configs_per_pool_and_layout_plus_all_disabled() -> None:
    configs = _mig_configs(stack(MIG_MIXED, MIG_SINGLE, WHOLE))
    assert configs["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert configs["tessera-infer"] == [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}]
    assert configs["tessera-infer.0"][0]["mig-devices"] == {"1g.5gb": 7}
    assert configs["tessera-infer.1"][0]["mig-devices"] == {"7g.40gb": 1}
    assert configs["tessera-slices"][0]["mig-devices"] == {"2g.10gb": 3}
    assert sorted(configs) == ["all-disabled", "tessera-infer", "tessera-infer.0", "tessera-infer.1", "tessera-slices"]


def test_label_values_set_by_node_pools_name_existing_entries() -> None:
    # what the node pools put in nvidia.com/mig.config and nvidia.com/device-plugin.config must exist
    config = stack(MIG_MIXED, TIMESLICE)
    assert contract.mig_config_name("infer") in _mig_configs(config)
    assert {contract.device_plugin_config_name("infer"), contract.device_plugin_config_name("t4")} <= set(_plugin_configs(config))


@pytest.mark.parametrize(
    ("pools", "strategy", "mig_manager"),
    [
        ((WHOLE,), "single", False),
        ((TIMESLICE, SHARED), "single", False),
        ((MIG_SINGLE,), "single", True),
        ((MIG_SINGLE, MIG_MIXED), "mixed", True),
        ((pool("a100-whole", "nvidia", "A100-40GB"),), "single", True),  # held at all-disabled
    ],
)
def test_operator_values_per_pool_mix(pools: tuple[dict[str, Any], ...], strategy: str, mig_manager: bool) -> None:
    chart = gpu_operator_chart(stack(*pools))
    assert chart is not None
    values = chart.values
    assert values["mig"]["strategy"] == strategy
    assert values["migManager"]["enabled"] is mig_manager
    assert values["driver"]["enabled"] is False  # TKE installs the driver through gpu_args
    assert values["toolkit"]["enabled"] is True
    assert values["devicePlugin"]["config"] == {"create": False, "name": DEVICE_PLUGIN_CONFIGMAP, "default": "default"}
    assert values["migManager"]["config"] == {"create": False, "name": MIG_PARTED_CONFIGMAP, "default": "all-disabled"}
    assert {"key": contract.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"} in values["daemonsets"]["tolerations"]
    assert {"key": contract.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"} in values["node-feature-discovery"]["worker"]["tolerations"]


def test_chart_coordinates_and_monitoring() -> None:
    config = stack(
        WHOLE, gpuOperator={"chartVersion": "v24.9.2", "namespace": "gpu-op"},
        monitoring={"mode": "existing", "selectorLabels": {"release": "prom"}, "scrapeIntervalSeconds": 15},
    )
    chart = gpu_operator_chart(config)
    assert chart is not None
    assert (chart.repo, chart.chart, chart.version, chart.namespace, chart.release_name) == (
        "https://helm.ngc.nvidia.com/nvidia",
        "gpu-operator",
        "v24.9.2",
        "gpu-op",
        "gpu-operator",
    )
    # dcgm-exporter's own namespace/pod/container labels (the pod holding the GPU) are kept, and the
    # existing Prometheus selects the operator's ServiceMonitor by the stack's selector labels
    service_monitor = {"enabled": True, "interval": "15s", "honorLabels": True, "additionalLabels": {"release": "prom"}}
    assert chart.values["dcgmExporter"] == {"enabled": True, "serviceMonitor": service_monitor}


@pytest.mark.parametrize("mode", ["none", "existing", "kube-prometheus-stack"])
def test_dcgm_exporter_service_monitor_only_where_a_prometheus_operator_is(mode: str) -> None:
    monitoring: dict[str, Any] = {"mode": mode}
    if mode == "kube-prometheus-stack":
        monitoring["kubePrometheusStack"] = {"grafana": {"enabled": False}}
    chart = gpu_operator_chart(stack(WHOLE, monitoring=monitoring))
    assert chart is not None
    service_monitor = chart.values["dcgmExporter"]["serviceMonitor"]
    assert service_monitor["enabled"] is (mode != "none")
    assert service_monitor["additionalLabels"] == ({"release": "kube-prometheus-stack"} if mode == "kube-prometheus-stack" else {})


@pytest.mark.parametrize(
    ("pools", "top"),
    [((SHARED,), {"monitoring": {"dcgmExporter": False}}), ((SHARED,), {"gpuOperator": {"enabled": False}, "monitoring": {"dcgmExporter": False}})],
    ids=["shared-only-without-dcgm", "operator-disabled"],
)
def test_no_operator_when_not_needed(pools: tuple[dict[str, Any], ...], top: dict[str, Any]) -> None:
    config = stack(*pools, **top)
    assert gpu_operator_chart(config) is None
    assert build_nvidia_objects(config) == []


def test_render_is_deterministic() -> None:
    assert build_nvidia_objects(stack(MIG_MIXED, TIMESLICE)) == build_nvidia_objects(stack(MIG_MIXED, TIMESLICE))
