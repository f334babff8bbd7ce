"""`plan_stack` figures for every shipped stack and for each pool kind's capacity rule."""
from __future__ import annotations

from pathlib import Path

import pytest
from config_cases import TKE_BASE, edit

from tessera.model import from_pulumi_mapping, load_stack_file
from tessera.model.plan import DCGM_EXPORTER, MIG_MANAGER, NVIDIA_DEVICE_PLUGIN, TESSERA_DEVICE_PLUGIN, TESSERA_NODE_AGENT, Range, plan_stack

STACKS = Path(__file__).resolve().parents[3] / "stacks"


def _plan(name: str):  # type: ignore[no-untyped-def]
    return plan_stack(load_stack_file(STACKS / f"Pulumi.{name}.yaml"))


def test_dev_plan() -> None:
    plan = _plan("dev")
    exclusive, shared = plan.pools
    assert (exclusive.kind, exclusive.instance_type, exclusive.gpu_model, exclusive.nodes, exclusive.gpus) == ("nvidia", "GN7.2XLARGE32", "T4", Range(0, 1, 2), Range(0, 1, 2))
    assert exclusive.capacity_per_node == {"nvidia.com/gpu": 1}
    assert exclusive.components == (NVIDIA_DEVICE_PLUGIN, DCGM_EXPORTER)
    assert (shared.kind, shared.nodes, shared.gpus) == ("shared", Range(1, 1, 4), Range(1, 1, 4))
    assert shared.capacity() == {"tessera.dev/gpu-core": Range(100, 100, 400), "tessera.dev/gpu-memory": Range(16384, 16384, 65536)}
    assert shared.components[:2] == (TESSERA_DEVICE_PLUGIN, TESSERA_NODE_AGENT)
    assert (plan.nodes, plan.gpus) == (Range(1, 2, 6), Range(1, 2, 6))


def test_prod_plan() -> None:
    plan = _plan("prod")
    assert [p.kind for p in plan.pools] == ["nvidia", "shared", "mig", "timeslice"]
    nvidia, shared, mig, timeslice = plan.pools
    assert (nvidia.gpus_per_node, nvidia.gpus) == (2, Range(2, 2, 8))
    assert (shared.gpu_model, shared.gpus_per_node, shared.capacity_per_node) == ("A10", 2, {"tessera.dev/gpu-core": 200, "tessera.dev/gpu-memory": 49152})
    # 2 x A100-40GB per node, each 3g.20gb + 2g.10gb + 2 x 1g.5gb, the 1g.5gb slices time-sliced x4
    assert mig.capacity_per_node == {"nvidia.com/mig-3g.20gb": 2, "nvidia.com/mig-2g.10gb": 2, "nvidia.com/mig-1g.5gb": 16}
    assert "8 MIG slices per node" in mig.details and MIG_MANAGER in mig.components
    assert [s.layout for s in mig.schedule] == ["all-1g.5gb", "all-7g.40gb"]
    assert [s.layout for s in shared.schedule] == ["4 shares per GPU", "whole GPUs"]
    assert timeslice.capacity() == {"nvidia.com/gpu": Range(0, 0, 8)}
    assert (plan.nodes, plan.gpus) == (Range(4, 4, 17), Range(8, 8, 32))
    assert plan.gpus_by_model() == {"T4": Range(2, 2, 10), "A10": Range(4, 4, 16), "A100-40GB": Range(2, 2, 6)}
    assert plan.capacity()["nvidia.com/gpu"] == Range(2, 2, 16)


def test_local_plan() -> None:
    plan = _plan("local")
    (pool,) = plan.pools
    assert (plan.provider, pool.instance_type, pool.gpu_model, pool.gpus) == ("existing", None, "T4", Range(1, 1, 1))
    assert DCGM_EXPORTER not in pool.components  # monitoring.dcgmExporter is off in the local stack


@pytest.mark.parametrize(
    ("mig", "time_slicing", "capacity"),
    [
        ({"strategy": "single", "profile": "all-1g.5gb"}, None, {"nvidia.com/gpu": 7}),
        ({"strategy": "single", "profile": "all-1g.5gb"}, {"replicas": 2}, {"nvidia.com/gpu": 14}),
        ({"strategy": "mixed", "profile": "all-balanced"}, None, {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-2g.10gb": 1, "nvidia.com/mig-3g.20gb": 1}),
    ],
)
def test_mig_capacity(mig: dict[str, object], time_slicing: dict[str, object] | None, capacity: dict[str, int]) -> None:
    pool = {"name": "m", "kind": "mig", "instanceType": "GT4.4XLARGE96", "mig": mig} | ({"timeSlicing": time_slicing} if time_slicing else {})
    plan = plan_stack(from_pulumi_mapping(edit(TKE_BASE, "nodePools", [pool])))
    assert plan.pools[0].capacity_per_node == capacity


def test_plan_json_has_totals() -> None:
    data = _plan("prod").to_json()
    assert data["totals"]["gpus"] == {"min": 8, "desired": 8, "max": 32}
    assert data["pools"][2]["capacityPerNode"]["nvidia.com/mig-1g.5gb"] == 16


SINGLE_POOL = {"name": "s", "kind": "mig", "instanceType": "GT4.4XLARGE96", "mig": {"strategy": "single", "profile": "all-1g.5gb"}, "timeSlicing": {"replicas": {"nvidia.com/gpu": 2}}}
MIXED_POOL = {"name": "m", "kind": "mig", "instanceType": "GT4.4XLARGE96", "mig": {"strategy": "mixed", "profile": "all-balanced"}}


@pytest.mark.parametrize(
    ("pools", "strategy", "single_pool_capacity"),
    [
        # only single pools: gpu-operator runs single, slices are nvidia.com/gpu
        ([SINGLE_POOL], "single", {"nvidia.com/gpu": 14}),
        # one mixed pool makes the whole cluster mixed: the single pool's slices get profile names,
        # and its nvidia.com/gpu time-slicing entry follows them
        ([SINGLE_POOL, MIXED_POOL], "mixed", {"nvidia.com/mig-1g.5gb": 14}),
    ],
)
def test_mig_resource_names_follow_the_cluster_wide_strategy(pools: list[dict[str, object]], strategy: str, single_pool_capacity: dict[str, int]) -> None:
    from tessera.manifests.nvidia_layouts import cluster_mig_strategy, device_plugin_entries

    cfg = from_pulumi_mapping(edit(TKE_BASE, "nodePools", pools))
    plan = plan_stack(cfg)
    single = plan.pools[0]
    assert single.capacity_per_node == single_pool_capacity
    assert f"MIG {strategy}: per GPU 1g.5gb x7" in single.details
    assert any("gpu-operator runs mixed" in d for d in single.details) is (strategy == "mixed")
    # the plan names the resources the rendered device plugin config time-slices
    assert cluster_mig_strategy(cfg) == strategy
    entry = next(e for e in device_plugin_entries(cfg) if e.name == "tessera-s")
    assert set(entry.replicas) == set(single_pool_capacity)


@pytest.mark.parametrize(
    ("gpu_driver", "line"),
    [
        ({"driver": "470.182.03"}, "TKE installs driver 470.182.03 + CUDA 11.4.3 + cuDNN 8.2.4"),
        ({"driver": "535.161.07"}, "TKE installs driver 535.161.07 + CUDA 12.2.2 + cuDNN 8.9.4 (not in the TencentCloud provider's docs; see docs/nvidia-pools.md)"),
    ],
)
def test_plan_names_the_gpu_software_tke_installs(gpu_driver: dict[str, str], line: str) -> None:
    pool = {"name": "t4", "kind": "nvidia", "instanceType": "GN7.2XLARGE32", "gpuDriver": gpu_driver}
    plan = plan_stack(from_pulumi_mapping(edit(TKE_BASE, "nodePools", [pool])))
    assert line in plan.pools[0].details
