"""Behaviour tables of the placement policies (what a user of a shared GPU pool sees)."""
from __future__ import annotations

import pytest

from tessera.alloc import (
    Cluster,
    ContainerRequest,
    FitFailure,
    GpuState,
    NodeState,
    PlacementPolicy,
    PodRequest,
    PodUid,
    WorkloadMix,
    extender_scores,
    static_snapshot,
)
from tessera.alloc.frag_policy import FragmentationAwarePolicy
from tessera.alloc.frag_settings import FragAwareSettings
from tessera.model.contract import LABEL_GPU_PLACEMENT, AppClass


def node(name: str, gpus: int = 2, *, memory: int = 16384, labels: dict[str, str] | None = None, model: str = "T4") -> NodeState:
    return NodeState(name, [GpuState(i, f"{name}-{i}", model, memory) for i in range(gpus)], 64000, 262144, labels or {})


def pod(uid: str, core: int, memory: int | None = None, app_class: AppClass | None = None, models: frozenset[str] | None = None) -> PodRequest:
    return PodRequest(PodUid(uid), (ContainerRequest.from_core("main", core, memory),), 1000, 1024, models, app_class)


def place_all(cluster: Cluster, pods: list[PodRequest], policy: PlacementPolicy | None = None) -> list[tuple[int, ...]]:
    out = []
    for p in pods:
        placement = cluster.schedule(p, policy)
        assert placement is not None, f"{p.uid} did not fit"
        cluster.reserve(p, placement)
        out.append(tuple(sorted(placement.gpu_indices)))
    return out


@pytest.mark.parametrize(
    ("policy", "labels", "same_gpu"),
    [
        (PlacementPolicy.BINPACK, {}, True),
        (PlacementPolicy.SPREAD, {}, False),
        (PlacementPolicy.FRAGMENTATION_AWARE, {}, True),
        (PlacementPolicy.FGD, {}, True),
        (PlacementPolicy.FRAGMENTATION_AWARE, {LABEL_GPU_PLACEMENT: "spread"}, False),
        (PlacementPolicy.SPREAD, {LABEL_GPU_PLACEMENT: "binpack"}, True),
    ],
)
def test_two_40_percent_jobs_share_a_gpu_only_when_packing(policy: PlacementPolicy, labels: dict[str, str], same_gpu: bool) -> None:
    cluster = Cluster([node("n1", 2, labels=labels)], policy=policy)
    first, second = place_all(cluster, [pod("a", 40), pod("b", 40)])
    assert (first == second) is same_gpu


@pytest.mark.parametrize("policy", list(PlacementPolicy))
def test_gpu_core_100_gets_a_whole_idle_gpu(policy: PlacementPolicy) -> None:
    cluster = Cluster([node("n1", 2)], policy=policy)
    (shared,) = place_all(cluster, [pod("share", 30)])
    placement = cluster.schedule(pod("whole", 100))
    assert placement is not None
    (grant,) = placement.containers[0].grants
    assert grant.index not in shared and grant.milli == 1000 and grant.memory_mib == 16384


def test_whole_gpu_request_fails_when_every_gpu_holds_a_share() -> None:
    cluster = Cluster([node("n1", 2)], policy=PlacementPolicy.SPREAD)
    place_all(cluster, [pod("a", 10), pod("b", 10)])
    assert cluster.check_fit(pod("whole", 100), "n1") is FitFailure.GPU


def test_multi_gpu_request_takes_n_idle_gpus() -> None:
    cluster = Cluster([node("n1", 4)])
    place_all(cluster, [pod("share", 50)])
    placement = cluster.schedule(pod("three", 300))
    assert placement is not None
    assert len(placement.gpu_indices) == 3 and all(g.milli == 1000 for g in placement.containers[0].grants)
    assert cluster.schedule(pod("four", 400)) is None


@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.FRAGMENTATION_AWARE, PlacementPolicy.FGD])
def test_online_pod_avoids_the_gpu_with_offline_work(policy: PlacementPolicy) -> None:
    cluster = Cluster([node("n1", 2)], policy=policy)
    (offline_gpu,) = place_all(cluster, [pod("batch", 30, app_class="offline")])
    (online_gpu,) = place_all(cluster, [pod("web", 30, app_class="online")])
    assert online_gpu != offline_gpu


def test_offline_pods_pack_together_even_under_spread() -> None:
    cluster = Cluster([node("n1", 2)], policy=PlacementPolicy.SPREAD)
    first, second = place_all(cluster, [pod("b1", 30, app_class="offline"), pod("b2", 30, app_class="offline")])
    assert first == second


def test_gpu_memory_is_a_second_dimension() -> None:
    cluster = Cluster([node("n1", 1, memory=16000)], policy=PlacementPolicy.BINPACK)
    place_all(cluster, [pod("a", 20, memory=10000)])
    assert cluster.check_fit(pod("b", 20, memory=8000), "n1") is FitFailure.GPU
    assert cluster.fits(pod("c", 20, memory=6000), "n1")


def test_unhealthy_gpu_is_not_used() -> None:
    cluster = Cluster([node("n1", 2)])
    cluster.set_gpu_health("n1", 0, False)
    assert place_all(cluster, [pod("a", 100)]) == [(1,)]
    assert cluster.schedule(pod("b", 10)) is None


def test_model_constraint_filters_nodes() -> None:
    cluster = Cluster([node("t4", 1), node("a10", 1, model="A10")])
    placement = cluster.schedule(pod("a", 50, models=frozenset({"A10"})))
    assert placement is not None and placement.node == "a10"
    assert cluster.check_fit(pod("b", 50, models=frozenset({"H100"})), "t4") is FitFailure.GPU_MODEL


def test_cpu_and_host_memory_are_checked() -> None:
    small = NodeState("small", [GpuState(0, "u", "T4", 16000)], cpu_milli=500, memory_mib=512)
    cluster = Cluster([small])
    assert cluster.check_fit(pod("a", 10), "small") is FitFailure.CPU


def test_fragmentation_aware_keeps_the_8_gpu_node_whole() -> None:
    mix = WorkloadMix(prior=static_snapshot([pod("w8", 800), pod("w1", 100)]))
    cluster = Cluster([node("big", 8), node("small", 2)], mix=mix)
    placement = cluster.schedule(pod("share", 50))
    assert placement is not None and placement.node == "small"


def test_extender_scores_give_the_best_node_10_alone() -> None:
    scores = extender_scores({"a": -5.0, "b": 3.0, "c": 2.9, "d": None})
    assert scores["b"] == 10 and scores["a"] == 0 and 0 < scores["c"] < 10 and scores["d"] == 0


def _sized(uid: str, gpus: int, milli: int, cpu: int, memory: int = 1024) -> PodRequest:
    return PodRequest(PodUid(uid), (ContainerRequest("main", gpus, milli),), cpu, memory)


def _host_mix_cluster(settings: FragAwareSettings) -> Cluster:
    """One 8-GPU node with 128 cores, two 4-GPU nodes with 32: the mix's GPU pods ask 8 cores per
    GPU, and 0.5 % of them are 8-GPU pods asking 120 cores (only the big node can host one)."""
    mix = static_snapshot([_sized(f"one{i}", 1, 1000, 8000) for i in range(199)] + [_sized("eight", 8, 1000, 120000)])
    nodes = [
        NodeState("big", [GpuState(i, f"big-{i}", "T4", 16384) for i in range(8)], 128000, 1 << 20),
        *(NodeState(f"small{k}", [GpuState(i, f"s{k}-{i}", "T4", 16384) for i in range(4)], 32000, 1 << 20) for k in (1, 2)),
    ]
    cluster = Cluster(nodes, mix=WorkloadMix(prior=mix))
    cluster.install_policy(FragmentationAwarePolicy(mix, settings))
    cluster.set_tie_ranking(["big", "small1", "small2"])
    return cluster


def test_cpu_hungry_pod_goes_where_cpu_is_left_over() -> None:
    """A 1-GPU pod asking 16 cores on a 4-GPU node with 32 leaves its other 3 GPUs 16 cores, enough
    for one more pod of the mix but not for three: FGD's one-pod-ahead measure (the policy without
    the host term) sees nothing wrong, host stranding sends the pod to the CPU-rich node."""
    placed = {}
    for weight in (0.0, 0.5):
        cluster = _host_mix_cluster(FragAwareSettings(host_weight=weight, reserve_horizon_pods=0))
        placement = cluster.schedule(_sized("hungry", 1, 1000, 16000))
        assert placement is not None
        placed[weight] = placement.node
    assert placed == {0.0: "small1", 0.5: "big"}


def test_last_node_able_to_host_a_rare_8_gpu_shape_is_kept_for_it() -> None:
    """Host stranding alone sends a CPU-heavy 1-GPU pod to the only node with 120 cores; with the
    reservation on it strands a GPU on a small node instead, and the 8-GPU pod still fits later."""
    outcome = {}
    for horizon in (0.0, 4000.0):
        cluster = _host_mix_cluster(FragAwareSettings(reserve_horizon_pods=horizon))
        hungry = _sized("hungry", 1, 1000, 16000)
        first = cluster.schedule(hungry)
        assert first is not None
        cluster.reserve(hungry, first)
        outcome[horizon] = (first.node, cluster.schedule(_sized("eight-later", 8, 1000, 120000)) is not None)
    assert outcome == {0.0: ("big", False), 4000.0: ("small1", True)}


def test_pod_that_may_run_anywhere_leaves_the_gpu_model_limited_pods_need() -> None:
    """Half the pods of the mix accept only T4s, and half the GPUs are T4s: a pod that accepts any
    model goes to an A100 node, although it strands a little CPU there, rather than take a T4 that
    a T4-only pod will be missing."""
    t4_only = frozenset({"T4"})
    mix = static_snapshot(
        [PodRequest(PodUid(f"t4-{i}"), (ContainerRequest("main", 1, 1000),), 8000, 1024, t4_only) for i in range(5)]
        + [_sized(f"any-{i}", 1, 1000, 8000) for i in range(5)]
    )
    chosen = {}
    for weight in (0.0, 1.0):
        nodes = [
            *(NodeState(f"t4-{k}", [GpuState(i, f"t{k}-{i}", "T4", 16384) for i in range(2)], 64000, 1 << 20) for k in "ab"),
            *(NodeState(f"a100-{k}", [GpuState(i, f"a{k}-{i}", "A100", 16384) for i in range(2)], 16000, 1 << 20) for k in "ab"),
        ]
        cluster = Cluster(nodes)
        cluster.install_policy(FragmentationAwarePolicy(mix, FragAwareSettings(model_weight=weight)))
        placement = cluster.schedule(_sized("anywhere", 1, 1000, 12000))
        assert placement is not None
        chosen[weight] = placement.node
    assert chosen == {0.0: "t4-a", 1.0: "a100-a"}


def test_shapes_competing_for_the_same_nodes_reserve_them_together() -> None:
    """Two rare 8-GPU shapes (120 cores / 700 GiB and 121 cores / 600 GiB) fit only the 128-core
    nodes. Each alone expects one pod within the horizon, together two, so once CPU-hungry pods
    (sent to the CPU-rich nodes by host stranding) have filled one of three such nodes, the next
    one strands CPU on a small node and the other two big nodes stay whole for those shapes."""
    one = [_sized(f"one{i}", 1, 1000, 8000) for i in range(398)]
    mix = static_snapshot(one + [_sized("a", 8, 1000, 120000, 700 << 10), _sized("b", 8, 1000, 121000, 600 << 10)])
    big = [NodeState(f"big{k}", [GpuState(i, f"b{k}-{i}", "T4", 16384) for i in range(8)], 128000, 1 << 20) for k in range(3)]
    small = [NodeState(f"small{k}", [GpuState(i, f"s{k}-{i}", "T4", 16384) for i in range(4)], 32000, 1 << 20) for k in range(3)]
    cluster = Cluster([*big, *small])
    cluster.install_policy(FragmentationAwarePolicy(mix, FragAwareSettings(reserve_horizon_pods=400)))
    cluster.set_tie_ranking([n.name for n in big + small])
    placed = []
    for i in range(9):
        hungry = _sized(f"p{i}", 1, 1000, 16000)
        placement = cluster.schedule(hungry)
        assert placement is not None
        cluster.reserve(hungry, placement)
        placed.append(placement.node)
    assert placed == ["big0"] * 8 + ["small0"]
    for shape in (_sized("a-later", 8, 1000, 120000, 700 << 10), _sized("b-later", 8, 1000, 121000, 600 << 10)):
        placement = cluster.schedule(shape)
        assert placement is not None
        cluster.reserve(shape, placement)
