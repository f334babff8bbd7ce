"""Node pool argument builders: typed provider inputs, GPU software, bounds, placement."""
from __future__ import annotations

from typing import Any

import pytest
import tencentcloud_iac_pulumi as tc

import tessera_pulumi.tke.node_pool as node_pool
from tessera.model import ClusterConfig, MigPool, NvidiaPool, SharedPool
from tessera.model.catalog import default_gpu_software, gpu_model
from tessera.model.labels_taints import TaintSpec
from tessera_pulumi.tke.node_pool import (
    NodeNetworkSettings,
    PoolPlacement,
    _build_gpu_args,
    _build_node_pool_args,
    _build_system_pool_args,
    _build_taint_args,
)
from tessera.model.contract import TAINT_GPU

PLACEMENT = PoolPlacement(
    cluster_id="cls-1",
    vpc_id="vpc-1",
    subnet_ids_by_zone={"ap-guangzhou-3": "subnet-3", "ap-guangzhou-4": "subnet-4"},
    security_group_ids=["sg-nodes"],
    node_os="tlinux3.1x86_64",
    tags={"tessera-cluster": "dev"},
)
T4 = {"name": "t4", "kind": "nvidia", "instanceType": "GN7.2XLARGE32", "minSize": 1, "maxSize": 3, "desiredSize": 2}
MIG = {"name": "mig", "kind": "mig", "instanceType": "GT4.4XLARGE96", "minSize": 0, "maxSize": 1, "mig": {"profile": "all-1g.5gb"}}


def test_node_pool_args_carry_instance_type_bounds_and_deletion() -> None:
    args = _build_node_pool_args(NvidiaPool.model_validate(T4), PLACEMENT)
    assert isinstance(args, tc.kubernetes.NodePoolArgs)
    assert args.auto_scaling_config.instance_type == "GN7.2XLARGE32"
    assert (args.min_size, args.desired_capacity, args.max_size) == (1, 2, 3)
    assert args.enable_auto_scale is True
    assert args.delete_keep_instance is False
    assert args.auto_scaling_config.orderly_security_group_ids == ["sg-nodes"]
    assert args.tags == {"tessera-cluster": "dev", "tessera-pool": "t4"}


def test_fixed_size_pool_does_not_autoscale() -> None:
    args = _build_node_pool_args(NvidiaPool.model_validate({**T4, "minSize": 2, "maxSize": 2, "desiredSize": 2}), PLACEMENT)
    assert args.enable_auto_scale is False


@pytest.mark.parametrize(("zones", "subnets"), [([], ["subnet-3", "subnet-4"]), (["ap-guangzhou-4"], ["subnet-4"])])
def test_pool_zones_select_subnets(zones: list[str], subnets: list[str]) -> None:
    args = _build_node_pool_args(NvidiaPool.model_validate({**T4, "zones": zones}), PLACEMENT)
    assert args.subnet_ids == subnets


def test_every_nested_input_is_a_typed_args_object() -> None:
    args = _build_node_pool_args(MigPool.model_validate(MIG), PLACEMENT)
    assert isinstance(args.auto_scaling_config, tc.kubernetes.NodePoolAutoScalingConfigArgs)
    assert isinstance(args.node_config, tc.kubernetes.NodePoolNodeConfigArgs)
    assert isinstance(args.node_config.gpu_args, tc.kubernetes.NodePoolNodeConfigGpuArgsArgs)
    assert args.taints and all(isinstance(t, tc.kubernetes.NodePoolTaintArgs) for t in args.taints)


@pytest.mark.parametrize(
    ("args_class", "misspelt"),
    [
        (tc.kubernetes.NodePoolArgs, "delete_keep_instances"),
        (tc.kubernetes.NodePoolAutoScalingConfigArgs, "instance_types"),
        (tc.kubernetes.NodePoolNodeConfigGpuArgsArgs, "mig_enabled"),
        (tc.kubernetes.NodePoolTaintArgs, "efect"),
        (tc.kubernetes.ClusterEndpointArgs, "cluster_internet_security_groups"),
        (tc.security.GroupRuleSetIngressArgs, "cidr"),
    ],
)
def test_a_misspelt_provider_keyword_is_a_type_error(args_class: Any, misspelt: str) -> None:
    with pytest.raises(TypeError, match=misspelt):
        args_class(**{misspelt: "x"})


def test_a_builder_with_a_misspelt_keyword_fails_before_anything_is_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builders' typed classes turn a typo into an error at the call, which a test then catches."""

    def misspelt(taints: list[TaintSpec]) -> list[Any]:
        return [tc.kubernetes.NodePoolTaintArgs(key=t.key, value=t.value, efect=t.effect) for t in taints]  # type: ignore[call-arg]

    monkeypatch.setattr(node_pool, "_build_taint_args", misspelt)
    with pytest.raises(TypeError, match="efect"):
        node_pool._build_node_pool_args(NvidiaPool.model_validate(T4), PLACEMENT)


def test_taint_args_keep_key_value_effect() -> None:
    (taint,) = _build_taint_args([TaintSpec(TAINT_GPU, "shared", "NoSchedule")])
    assert (taint.key, taint.value, taint.effect) == (TAINT_GPU, "shared", "NoSchedule")


def test_gpu_args_use_the_catalog_record_for_the_gpu() -> None:
    gpu_args = _build_gpu_args(NvidiaPool.model_validate(T4))
    expected = default_gpu_software(gpu_model("T4"))  # type: ignore[arg-type]
    assert gpu_args.driver == {"version": expected.driver.version, "name": expected.driver.name}
    assert gpu_args.cuda == {"version": expected.cuda.version, "name": expected.cuda.name}
    assert gpu_args.cudnn == {"version": expected.cudnn.version, "name": expected.cudnn.name}
    assert gpu_args.mig_enable is False


GPU_ARGS = [
    # gpuDriver -> what TKE gets: the installer files of one whole record (terraform-provider-tencentcloud's
    # node pool test uses exactly the 470.182.03 set; the .deb set is its older e2e set with doc/dev packages)
    (
        {"driver": "470.182.03", "cuda": "11.4.3", "cudnn": "8.2.4"},
        {"version": "470.182.03", "name": "NVIDIA-Linux-x86_64-470.182.03.run"},
        {"version": "11.4.3", "name": "cuda_11.4.3_470.82.01_linux.run"},
        {"version": "8.2.4", "name": "cudnn-11.4-linux-x64-v8.2.4.15.tgz"},
    ),
    (
        {"cudnn": "8.1.0"},
        {"version": "450.102.04", "name": "NVIDIA-Linux-x86_64-450.102.04.run"},
        {"version": "11.0.3", "name": "cuda_11.0.3_450.51.06_linux.run"},
        {
            "version": "8.1.0",
            "name": "libcudnn8_8.1.0.77-1+cuda11.2_amd64.deb",
            "doc_name": "libcudnn8-samples_8.1.0.77-1+cuda11.2_amd64.deb",
            "dev_name": "libcudnn8-dev_8.1.0.77-1+cuda11.2_amd64.deb",
        },
    ),
    (
        {"driver": "535.161.07"},
        {"version": "535.161.07", "name": "NVIDIA-Linux-x86_64-535.161.07.run"},
        {"version": "12.2.2", "name": "cuda_12.2.2_535.104.05_linux.run"},
        {"version": "8.9.4", "name": "cudnn-linux-x86_64-8.9.4.25_cuda12-archive.tar.xz"},
    ),
]


@pytest.mark.parametrize(("gpu_driver", "driver", "cuda", "cudnn"), GPU_ARGS, ids=["provider-470", "provider-deb", "r535"])
def test_gpu_args_carry_the_whole_record_the_pool_names(gpu_driver: dict[str, str], driver: dict[str, str], cuda: dict[str, str], cudnn: dict[str, str]) -> None:
    gpu_args = _build_gpu_args(SharedPool.model_validate({**T4, "kind": "shared", "gpuDriver": gpu_driver}))
    assert (gpu_args.driver, gpu_args.cuda, gpu_args.cudnn) == (driver, cuda, cudnn)


def test_custom_driver_url_replaces_the_driver() -> None:
    gpu_args = _build_gpu_args(NvidiaPool.model_validate({**T4, "gpuDriver": {"customDriverUrl": "https://mirror.example/driver.run"}}))
    assert gpu_args.custom_driver == {"address": "https://mirror.example/driver.run"}
    assert gpu_args.driver is None
    default = default_gpu_software(gpu_model("T4"))  # type: ignore[arg-type]
    assert gpu_args.cuda == {"version": default.cuda.version, "name": default.cuda.name}


def test_mig_pools_enable_mig_mode() -> None:
    assert _build_gpu_args(MigPool.model_validate(MIG)).mig_enable is True


@pytest.mark.parametrize(("settings", "public_ip", "bandwidth"), [(NodeNetworkSettings(), True, 100), (NodeNetworkSettings(public_egress=False), False, None)])
def test_node_egress_settings(settings: NodeNetworkSettings, public_ip: bool, bandwidth: int | None) -> None:
    config = _build_node_pool_args(NvidiaPool.model_validate(T4), PLACEMENT, settings).auto_scaling_config
    assert config.public_ip_assigned is public_ip
    assert config.internet_max_bandwidth_out == bandwidth


def test_system_pool_is_untainted_fixed_size_and_gpu_free() -> None:
    cluster = ClusterConfig.model_validate({"provider": "tke", "name": "dev", "systemNodes": {"instanceType": "SA2.LARGE8", "count": 3}})
    args = _build_system_pool_args(cluster, PLACEMENT)
    assert (args.min_size, args.desired_capacity, args.max_size) == (3, 3, 3)
    assert args.taints is None and args.labels is None
    assert args.node_config.gpu_args is None
    assert args.delete_keep_instance is False
    assert args.auto_scaling_config.instance_type == "SA2.LARGE8"


@pytest.mark.parametrize(("sizes", "ignored"), [((1, 3), ["desiredCapacity"]), ((2, 2), [])])
def test_autoscaled_pools_leave_the_node_count_to_the_autoscaler(sizes: tuple[int, int], ignored: list[str]) -> None:
    low, high = sizes
    args = _build_node_pool_args(NvidiaPool.model_validate({**T4, "minSize": low, "maxSize": high, "desiredSize": low}), PLACEMENT)
    assert node_pool._ignored_changes(args) == ignored
