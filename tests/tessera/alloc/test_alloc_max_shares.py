"""`tessera.dev/max-shares-per-gpu`: a GPU holding that many shares takes no further share;
whole-GPU requests and nodes without the label are unaffected."""
from __future__ import annotations

import pytest

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PlacementPolicy, PodRequest, PodUid
from tessera.model.contract import LABEL_GPU_PLACEMENT, LABEL_MAX_SHARES_PER_GPU


def _node(gpus: int, cap: str | None, placement: str = "binpack") -> NodeState:
    labels = {LABEL_GPU_PLACEMENT: placement}
    if cap is not None:
        labels[LABEL_MAX_SHARES_PER_GPU] = cap
    return NodeState("n", [GpuState(i, f"GPU-{i}", "T4", 15360) for i in range(gpus)], labels=labels)


def _pod(name: str, core: int) -> PodRequest:
    return PodRequest(PodUid(name), (ContainerRequest.from_core("main", core),))


def _place_all(cluster: Cluster, cores: list[int], policy: PlacementPolicy) -> list[int | None]:
    """GPU index each pod lands on in order (None: it does not fit)."""
    out: list[int | None] = []
    for i, core in enumerate(cores):
        pod = _pod(f"p{i}", core)
        placement = cluster.place(pod, "n", policy)
        if placement is None:
            out.append(None)
            continue
        cluster.reserve(pod, placement)
        out.append(placement.containers[0].grants[0].index)
    return out


# (GPUs, label value, pods' gpu-core in order, GPU each lands on)
TABLE: list[tuple[int, str | None, list[int], list[int | None]]] = [
    (1, None, [10, 10, 10, 10], [0, 0, 0, 0]),  # no label: only compute limits
    (1, "2", [10, 10, 10], [0, 0, None]),  # the third share finds no GPU with room for a share
    (2, "1", [10, 10, 10], [0, 1, None]),  # night layout: one pod per GPU, binpack or not
    (2, "1", [10, 100], [0, 1]),  # a whole GPU still takes the idle GPU
    (2, "1", [100, 10, 10], [0, 1, None]),  # a whole GPU is not a share; the GPU it holds is not idle
    (1, "4", [30, 30, 30, 30], [0, 0, 0, None]),  # compute still limits below the cap
    (1, "0", [10, 10], [0, 0]),  # unreadable cap (0, or text) means no cap
    (1, "many", [10, 10], [0, 0]),
]


@pytest.mark.parametrize(("gpus", "cap", "cores", "expected"), TABLE)
@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.FRAGMENTATION_AWARE])
def test_max_shares_per_gpu_caps_shares_not_whole_gpus(
    gpus: int, cap: str | None, cores: list[int], expected: list[int | None], policy: PlacementPolicy
) -> None:
    assert _place_all(Cluster([_node(gpus, cap)]), cores, policy) == expected


def test_release_frees_a_share_slot() -> None:
    cluster = Cluster([_node(1, "1")])
    assert _place_all(cluster, [10, 10], PlacementPolicy.BINPACK) == [0, None]
    cluster.release(PodUid("p0"))
    assert cluster.fits(_pod("again", 10), "n"), "the GPU's only share slot is free again"


def test_lowering_the_cap_keeps_running_pods_and_blocks_new_shares() -> None:
    cluster = Cluster([_node(1, "4")])
    assert _place_all(cluster, [10, 10], PlacementPolicy.BINPACK) == [0, 0]
    assert cluster.add_node(_node(1, "1")) == [], "a layout change never evicts: both pods stay recorded"
    assert set(cluster.allocated()) == {PodUid("p0"), PodUid("p1")}
    assert not cluster.fits(_pod("new", 10), "n"), "two shares already, cap 1"
