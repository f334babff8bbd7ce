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
