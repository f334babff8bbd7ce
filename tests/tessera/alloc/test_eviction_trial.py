"""An eviction trial answers every fit check as `Cluster.evaluate_without` answers it for the same
victims, moving only the pods that changed since the check before, and leaves the cluster as it
found it: after `close`, and when the search in its `with` block raises."""
from __future__ import annotations

import random
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PlacementPolicy, PodRequest, PodUid
from tessera.alloc.eviction import SetAside


def _cluster(policy: PlacementPolicy, seed: int) -> tuple[Cluster, list[PodUid]]:
    """Two 4-GPU nodes filled at random by the policy; the pods placed on node n0."""
    rng = random.Random(seed)
    cluster = Cluster(policy=policy)
    for name in ("n0", "n1"):
        cluster.add_node(NodeState(name, [GpuState(g, f"{name}-{g}", "T4", 16384) for g in range(4)], 64000, 262144))
    held: list[PodUid] = []
    for i in range(40):
        pod = PodRequest(PodUid(f"p{i}"), (ContainerRequest("main", 1, rng.choice([100, 200, 250, 500, 1000])),), cpu_milli=rng.choice([500, 4000]))
        node = rng.choice(["n0", "n1"])
        placement = cluster.place(pod, node)
        if placement is not None:
            cluster.reserve(pod, placement)
            if node == "n0":
                held.append(pod.uid)
    return cluster, held


def _usage(cluster: Cluster) -> object:
    return (
        dict(cluster.allocated()),
        {name: ([(g.used_milli, g.used_memory_mib, g.shares, g.offline_milli) for g in node.gpus], node.used_cpu_milli, node.used_memory_mib) for name, node in cluster.nodes.items()},
    )


PREEMPTORS = {
    "share": PodRequest(PodUid("urgent"), (ContainerRequest("main", 1, 600),)),
    "whole-gpu": PodRequest(PodUid("urgent"), (ContainerRequest("main", 1, 1000),)),
    "two-gpus": PodRequest(PodUid("urgent"), (ContainerRequest("main", 2, 1000),), cpu_milli=8000),
}


@pytest.mark.parametrize("preemptor", list(PREEMPTORS))
@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.FRAGMENTATION_AWARE])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), moves=st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 60), max_size=6)), max_size=25))
def test_each_check_answers_what_evaluate_without_answers(policy: PlacementPolicy, preemptor: str, seed: int, moves: list[tuple[bool, list[int]]]) -> None:
    """A random run of evictions and give-backs (pods of n0, of n1, unknown UIDs, repeats) on
    one cluster, `evaluate_without` of the same victims on its twin: the same evaluation at
    every step, and the cluster as before once the trial is closed."""
    cluster, _ = _cluster(policy, seed)
    twin, _ = _cluster(policy, seed)
    pod = PREEMPTORS[preemptor]
    before = _usage(cluster)
    victims: set[str] = set()
    with cluster.eviction_trial(pod, "n0") as trial:
        for evict, numbers in moves:
            uids = [f"p{n}" for n in numbers]
            (trial.evict if evict else trial.keep)(uids)
            victims = victims | set(uids) if evict else victims - set(uids)
            assert trial.evaluate() == twin.evaluate_without(pod, "n0", [PodUid(u) for u in sorted(victims)])
    assert _usage(cluster) == before


def test_a_search_that_raises_leaves_the_cluster_as_it_was() -> None:
    cluster, held = _cluster(PlacementPolicy.FRAGMENTATION_AWARE, 3)
    before = _usage(cluster)
    with pytest.raises(TimeoutError), cluster.eviction_trial(PREEMPTORS["whole-gpu"], "n0") as trial:
        trial.evict(held)
        trial.fits()
        trial.keep(held[:2])
        raise TimeoutError("the preemption budget ran out")
    assert _usage(cluster) == before


def test_a_check_moves_only_the_pods_that_changed() -> None:
    """Giving back one victim after another, with the one before evicted again: each check
    moves two pods (one back, one off), not every victim."""
    cluster, held = _cluster(PlacementPolicy.BINPACK, 5)
    moved: list[int] = []
    set_aside = cluster.set_aside

    def counting(node_name: str, evict: Iterable[PodUid], put_back: Iterable[SetAside] = ()) -> list[SetAside]:
        evicting, returning = list(evict), list(put_back)
        taken = set_aside(node_name, evicting, returning)
        moved.append(len(taken) + len(returning))
        return taken

    cluster.set_aside = counting  # type: ignore[method-assign]
    with cluster.eviction_trial(PREEMPTORS["whole-gpu"], "n0") as trial:
        trial.evict(held)
        trial.fits()
        for previous, uid in zip(held, held[1:]):
            trial.keep([uid])
            trial.evict([previous])
            trial.fits()
    assert len(held) > 5
    # all off, then one back, then one back and one off per check; at the close the rest back
    assert moved == [len(held), 1, *[2] * (len(held) - 2), len(held) - 1]
