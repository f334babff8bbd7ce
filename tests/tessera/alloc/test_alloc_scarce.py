"""Keeping the nodes that alone can host a hard shape, and learning the hard shapes soon enough."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PodRequest, PodUid, WorkloadMix, static_snapshot
from tessera.alloc.frag_policy import FragmentationAwarePolicy
from tessera.alloc.frag_settings import FragAwareSettings
from tessera.alloc.workload import MixSettings


def _sized(uid: str, gpus: int, milli: int, cpu: int, models: frozenset[str] | None = None) -> PodRequest:
    containers = (ContainerRequest("main", gpus, milli),) if gpus else ()
    return PodRequest(PodUid(uid), containers, cpu, 1024, models)


def _eight(name: str, cores: int) -> NodeState:
    return NodeState(name, [GpuState(i, f"{name}-{i}", "G2", 16384) for i in range(8)], cores * 1000, 1 << 20)


# 1-GPU pods asking 8 cores, and 0.5 % 8-GPU pods asking 120 cores (only 128-core nodes host them)
MIX = static_snapshot([_sized(f"one{i}", 1, 1000, 8000) for i in range(199)] + [_sized("eight", 8, 1000, 120000)])


@pytest.mark.parametrize(("cpu_only", "where"), [(False, "big"), (True, "small")])
def test_a_cpu_only_pod_is_held_off_the_last_node_a_reserved_shape_fits(cpu_only: bool, where: str) -> None:
    """The 128-core node is the only host of the 8-GPU 120-core shape and the reservation is on.
    A CPU-only pod asking 32 cores strands GPUs on the 64-core node (32 cores left for 8 GPUs
    whose pods ask 8 each), so host stranding sends it to the big node, leaving 96 cores there.
    Held off, it strands GPUs instead and the 8-GPU pod still fits later."""
    cluster = Cluster([_eight("big", 128), _eight("small", 64)], mix=WorkloadMix(prior=MIX))
    cluster.install_policy(FragmentationAwarePolicy(MIX, FragAwareSettings(reserve_cpu_only=cpu_only)))
    cluster.set_tie_ranking(["big", "small"])
    cpu_pod = _sized("cpu", 0, 0, 32000)
    placement = cluster.schedule(cpu_pod)
    assert placement is not None and placement.node == where
    cluster.reserve(cpu_pod, placement)
    assert (cluster.schedule(_sized("eight-later", 8, 1000, 120000)) is not None) is cpu_only


@pytest.mark.parametrize(("weight", "where"), [(0.0, "big0"), (0.1, "small0")])
def test_the_few_nodes_a_scarce_shape_fits_are_broken_last_before_any_reservation(weight: float, where: str) -> None:
    """2 of 20 8-GPU nodes have the 128 cores an 8-GPU 120-core pod needs (scarce: 10 %). With a
    short horizon the reservation is off (one pod expected, two hosts), so host stranding alone
    sends a 20-core 1-GPU pod to a 128-core node (on a 64-core one it leaves 44 cores for 7 GPUs
    whose pods ask 8 each); the scarce-shape cost, larger than that stranding, keeps them whole."""
    nodes = [_eight(f"big{k}", 128) for k in range(2)] + [_eight(f"small{k}", 64) for k in range(18)]
    cluster = Cluster(nodes, mix=WorkloadMix(prior=MIX))
    settings = FragAwareSettings(reserve_horizon_pods=100, scarce_weight=weight)
    cluster.install_policy(FragmentationAwarePolicy(MIX, settings))
    cluster.set_tie_ranking([n.name for n in nodes])
    placement = cluster.schedule(_sized("hungry", 1, 1000, 20000))
    assert placement is not None and placement.node == where


@pytest.mark.parametrize(("ratio", "seen"), [(2.0, True), (0.0, False)])
def test_pods_limited_to_a_model_reach_the_snapshot_when_the_first_arrives(ratio: float, seen: bool) -> None:
    """100 any-model pods settle the mix; the first P100-only pod changes no shape enough for a
    drift check to take a new snapshot, but model pressure needs to know about it now."""
    mix = WorkloadMix(MixSettings(limited_refresh_ratio=ratio))
    for i in range(100):
        mix.observe(_sized(f"any{i}", 1, 1000, 8000))
        mix.snapshot()
    mix.observe(_sized("p100", 1, 500, 4000, frozenset({"P100"})))
    limited = dict(mix.snapshot().limited)
    assert (frozenset({"P100"}) in limited) is seen


@pytest.mark.parametrize(("floor", "kept"), [(1e-5, True), (None, False)])
def test_a_rare_8_gpu_shape_stays_in_the_mix_after_the_mix_moves_on(floor: float | None, kept: bool) -> None:
    """One 8-GPU pod among thousands: when the mix drifts and a new snapshot is taken, its decayed
    weight (x 8 GPUs) is under `min_weight`, but its reservation must not go with it."""
    mix = WorkloadMix(MixSettings(min_weight_multi=floor))
    for i in range(1000):
        mix.observe(_sized(f"a{i}", 1, 1000, 8000))
        mix.snapshot()
    mix.observe(_sized("eight", 8, 1000, 120000))
    epoch = mix.snapshot().epoch
    for i in range(5000):
        mix.observe(_sized(f"b{i}", 1, 500, 4000))
        mix.snapshot()
    snapshot = mix.snapshot()
    assert snapshot.epoch > epoch, "the mix moved: a new snapshot was taken"
    assert not any(s.gpu_count == 8 for s in snapshot.shapes), "too rare to weigh in the fragmentation measure"
    assert any(s.gpu_count == 8 for s in snapshot.rare_multi) is kept, "but its hosts are still guarded"


@pytest.mark.parametrize(
    ("prior", "multi", "where"), [(False, True, "big0"), (True, True, "small0"), (False, False, "big0"), (True, False, "small0")]
)
def test_whole_nodes_of_a_rare_kind_are_kept_before_any_hard_shape_was_seen(prior: bool, multi: bool, where: str) -> None:
    """No 8-GPU pod in the mix yet (only 2-GPU pods, which any node hosts, or no multi-GPU pod at
    all, as under the first pods' prior), so no shape marks the two 128-core nodes (of 20 8-GPU
    nodes) as the only hosts of anything. With the prior they are still kept whole: the 20-core
    pod strands a little CPU on a 64-core node instead."""
    ones = static_snapshot([_sized(f"one{i}", 1, 1000, 8000) for i in range(199)] + [_sized("two", 2 if multi else 1, 1000, 8000)])
    nodes = [_eight(f"big{k}", 128) for k in range(2)] + [_eight(f"small{k}", 64) for k in range(18)]
    cluster = Cluster(nodes, mix=WorkloadMix(prior=ones))
    cluster.install_policy(FragmentationAwarePolicy(ones, FragAwareSettings(scarce_prior=prior)))
    cluster.set_tie_ranking([n.name for n in nodes])
    placement = cluster.schedule(_sized("hungry", 1, 1000, 20000))
    assert placement is not None and placement.node == where


# 1-GPU pods asking 10 cores and 0.5 % 8-GPU pods asking 120 cores: ~10.2 cores per GPU asked
TEN = static_snapshot([_sized(f"ten{i}", 1, 1000, 10000) for i in range(199)] + [_sized("eight", 8, 1000, 120000)])


@pytest.mark.parametrize(
    ("cpu_only", "headroom", "hungry", "where"),
    [
        (True, 1.0, 0, "small"),  # 256 cores free for 24 GPUs needing ~245: CPU plentiful, held off
        (True, 1.0, 40000, "big"),  # a 40-core pod took 1 GPU: 216 cores for 23 GPUs needing ~234
        (True, 0.0, 40000, "small"),  # no headroom test: held off however short CPU is
        (False, 1.0, 0, "big"),  # CPU-only pods never charged
    ],
)
def test_a_cpu_only_pod_is_held_off_a_reserved_node_only_while_cpu_is_plentiful(
    cpu_only: bool, headroom: float, hungry: int, where: str
) -> None:
    """The 128-core node is the only host of the reserved 8-GPU 120-core shape. A 32-core CPU-only
    pod strands GPUs on a 64-core node, so host stranding alone sends it to the big one. While
    the free CPU can feed the free GPUs it is held off (the 8-GPU pod still fits later); once a
    CPU-hungry pod has made CPU the binding resource, every core is worth more to GPU pods than
    the reservation, and it goes where it strands least. The first look is cached before the
    hungry pod binds: the switch must not serve it stale."""
    nodes = [_eight("big", 128), _eight("small", 64), _eight("mid", 64)]
    cluster = Cluster(nodes, mix=WorkloadMix(prior=TEN))
    settings = FragAwareSettings(reserve_cpu_only=cpu_only, cpu_only_headroom=headroom)
    cluster.install_policy(FragmentationAwarePolicy(TEN, settings))
    cluster.set_tie_ranking(["big", "small", "mid"])
    cpu_pod = _sized("cpu", 0, 0, 32000)
    assert cluster.schedule(cpu_pod) is not None
    if hungry:
        hog = _sized("hog", 1, 1000, hungry)
        placed = cluster.schedule(hog, candidates=["mid"])
        assert placed is not None
        cluster.reserve(hog, placed)
    placement = cluster.schedule(cpu_pod)
    assert placement is not None and placement.node == where
    cluster.reserve(cpu_pod, placement)
    assert (cluster.schedule(_sized("eight-later", 8, 1000, 120000)) is not None) is (where != "big")


@pytest.mark.parametrize(
    ("need_cpu", "hungry", "where"),
    [
        (True, 0, "small"),  # CPU plentiful: the rare shape's last host is kept
        (True, 40000, "big"),  # CPU short: the guard is dropped, host stranding decides
        (False, 40000, "small"),  # held regardless
    ],
)
def test_a_rare_shape_kept_only_for_reservations_is_guarded_only_while_cpu_is_plentiful(need_cpu: bool, hungry: int, where: str) -> None:
    """The 8-GPU 120-core shape is in the mix only as a rare shape (`rare_multi`, too rare to be
    weighed), so only its reservation keeps the 128-core node whole. A 1-GPU pod asking 30 cores
    strands less on the big node; held off it, it goes to a 64-core node, until CPU is short."""
    from tessera.alloc.workload import MixSnapshot, TypicalShape

    ones = static_snapshot([_sized(f"ten{i}", 1, 1000, 10000) for i in range(200)])
    mix = MixSnapshot(1, ones.shapes, (), (TypicalShape(8, 1000, None, 120000, 1024, None, 0.0005),))
    nodes = [_eight("big", 128), _eight("small", 64), _eight("mid", 64)]
    cluster = Cluster(nodes, mix=WorkloadMix(prior=mix))
    cluster.install_policy(FragmentationAwarePolicy(mix, FragAwareSettings(rare_multi_need_cpu=need_cpu, scarce_prior=False)))
    cluster.set_tie_ranking(["big", "small", "mid"])
    if hungry:
        hog = _sized("hog", 1, 1000, hungry)
        placed = cluster.schedule(hog, candidates=["mid"])
        assert placed is not None
        cluster.reserve(hog, placed)
    placement = cluster.schedule(_sized("wide", 1, 1000, 30000))
    assert placement is not None and placement.node == where


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_the_free_cpu_and_gpu_the_cpu_test_reads_match_the_nodes(seed: int) -> None:
    """Through binds, releases and GPU health flips, the cluster-wide free CPU and free GPU
    compute behind `cpu_plenty` equal the sums over the nodes as they are now: a drift would
    switch the CPU-only rule at the wrong load."""
    rng = random.Random(seed)
    nodes = [_eight(f"n{k}", rng.choice([64, 96, 128])) for k in range(6)]
    cluster = Cluster(nodes, mix=WorkloadMix(prior=TEN))
    cluster.install_policy(FragmentationAwarePolicy(TEN))
    held: list[PodUid] = []
    for step in range(80):
        roll = rng.random()
        if roll < 0.6:
            gpus = rng.choice([0, 1, 1, 2, 8])
            pod = _sized(f"p{step}", gpus, 1000 if gpus != 1 else rng.choice([250, 500, 1000]), rng.choice([2000, 10000, 32000]))
            placement = cluster.schedule(pod)
            if placement is not None:
                cluster.reserve(pod, placement)
                held.append(pod.uid)
        elif roll < 0.85 and held:
            cluster.release(held.pop(rng.randrange(len(held))))
        else:
            node = rng.choice(list(cluster.nodes.values()))
            gpu = rng.choice(node.gpus)
            cluster.set_gpu_health(node.name, gpu.index, not gpu.healthy)
        reserve = cluster.policy()._reserve  # type: ignore[attr-defined]
        assert reserve._free_cpu == sum(n.free_cpu_milli for n in cluster.nodes.values())
        assert reserve._free_gpu == sum(g.free_milli for n in cluster.nodes.values() for g in n.gpus if g.healthy)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 1_000_000), horizon=st.sampled_from([0.0, 100.0, 4000.0]))
def test_scores_of_many_nodes_at_once_equal_node_by_node(seed: int, horizon: float) -> None:
    """`evaluate_many` decides the scarce and reservation terms once per pod (`scarce_losses`,
    `penalties`); node by node, `evaluate` asks for each: the same keys and GPUs, bit for bit,
    with reservations off, on, and scarce 128-core nodes broken or whole."""
    rng = random.Random(seed)
    count = rng.randrange(10, 30)
    big = rng.choice([1, 2, count // 3])  # 1-2 128-core nodes of 10-29: the 120-core 8-GPU shape is scarce
    nodes = [_eight(f"n{k}", 128 if k < big else 64) for k in range(count)]
    cluster = Cluster(nodes, mix=WorkloadMix(prior=MIX))
    policy = FragmentationAwarePolicy(MIX, FragAwareSettings(reserve_horizon_pods=horizon))
    cluster.install_policy(policy)
    for i in range(rng.randrange(0, 60)):
        gpus = rng.choice([0, 1, 1, 1, 2])
        pod = _sized(f"fill{i}", gpus, 1000 if gpus > 1 else rng.choice([250, 500, 1000]), rng.choice([4000, 8000, 30000]))
        placement = cluster.schedule(pod)
        if placement is not None:
            cluster.reserve(pod, placement)
    states = list(cluster.nodes.values())
    for j in range(4):
        gpus = rng.choice([0, 1, 1, 8])
        probe = _sized(f"probe{j}", gpus, 1000 if gpus > 1 else rng.choice([100, 400, 1000]), rng.choice([2000, 16000, 120000]))
        assert policy.evaluate_many(states, probe) == [policy.evaluate(node, probe) for node in states]
