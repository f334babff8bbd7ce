"""The evaluation shortcuts give exactly what the policy gives: same failure reason, same key,
same GPUs, bit for bit (a float that differs in its last digit can move a pod)."""
from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    static_snapshot,
)
from tessera.alloc.assign import assign, capacity_of, certain_failure, gpu_binpack, host_fit
from tessera.alloc.frag_policy import FgdPolicy, FragmentationAwarePolicy
from tessera.alloc.fragmentation import FragmentationMeasure, GpuFree
from tessera.alloc.policy import Policy
from tessera.model.contract import LABEL_GPU_PLACEMENT, LABEL_MAX_SHARES_PER_GPU

CACHEABLE = [p for p in PlacementPolicy if p is not PlacementPolicy.RANDOM]


def _node(rng: random.Random, name: str, *, varied: bool = True) -> NodeState:
    """`varied=False`: one of a few node types, so that nodes often share a state."""
    if not varied:
        gpus = [GpuState(i, f"{name}-{i}", "T4", 16384) for i in range(rng.choice([1, 2]))]
        return NodeState(name, gpus, 32000, 65536)
    model = rng.choice(["T4", "A100"])
    gpus = [GpuState(i, f"{name}-{i}", model if rng.random() < 0.8 else "P100", rng.choice([16384, 32768])) for i in range(rng.choice([0, 1, 2, 4, 8]))]
    labels: dict[str, str] = {}
    if rng.random() < 0.2:
        labels[LABEL_GPU_PLACEMENT] = rng.choice(["binpack", "spread"])
    if rng.random() < 0.2:
        labels[LABEL_MAX_SHARES_PER_GPU] = str(rng.choice([1, 2]))
    return NodeState(name, gpus, rng.choice([None, 32000, 96000]), rng.choice([None, 65536]), labels)


def _pod(rng: random.Random, uid: str) -> PodRequest:
    containers = []
    for k in range(rng.choice([1, 1, 1, 2])):
        kind = rng.random()
        if kind < 0.1:
            containers.append(ContainerRequest(f"c{k}", 0, 0))
        elif kind < 0.45:
            containers.append(ContainerRequest(f"c{k}", rng.choice([1, 2, 4, 8]), 1000))
        else:
            containers.append(ContainerRequest(f"c{k}", 1, rng.choice([50, 250, 500, 990]), rng.choice([None, 0, 8192, 20000])))
    return PodRequest(
        PodUid(uid),
        tuple(containers),
        rng.choice([0, 4000, 16000, 64000]),
        rng.choice([0, 16384, 100000]),
        rng.choice([None, None, frozenset({"T4"}), frozenset({"H100"})]),
        rng.choice([None, None, "offline"]),
    )


def _fresh(policy: Policy, nodes: Iterable[NodeState] = ()) -> Policy:
    """The same policy with empty caches (the fragmentation policies memoise internally); the
    fragmentation-aware one is shown `nodes`, the inventory its reservations count."""
    if isinstance(policy, FragmentationAwarePolicy):
        fresh = FragmentationAwarePolicy(policy.snapshot, policy.settings)
        for node in nodes:
            fresh.node_changed(node)
        # the switch of a reservation depends on history (hysteresis), so it is taken over;
        # which nodes can host which shape, and every score, are recomputed
        fresh._reserve._active, fresh._reserve._settled = policy._reserve.active, True
        # and whether CPU is plentiful (CPU-only pods and rare shapes' guards)
        fresh._reserve._cpu_plenty, fresh._reserve._cpu_settled = policy._reserve._plenty(), True
        # so does a GPU model's protection (model pressure)
        policy._pressure.cost("")
        fresh._pressure._protected, fresh._pressure._settled = policy._pressure._protected, True
        return fresh
    if isinstance(policy, FgdPolicy):
        return FgdPolicy(policy.snapshot)
    return policy


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(CACHEABLE), varied=st.booleans())
def test_cached_evaluations_equal_fresh_ones(seed: int, policy: PlacementPolicy, varied: bool) -> None:
    """Through binds, releases and health flips, with many shapes cached per node and per state,
    the cluster's answer equals the policy's on the node as it is now."""
    _check_cached_against_fresh(random.Random(seed), policy, varied, nodes=12, steps=60)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from([PlacementPolicy.FRAGMENTATION_AWARE, PlacementPolicy.BINPACK]))
def test_cached_evaluations_equal_fresh_ones_over_many_nodes(seed: int, policy: PlacementPolicy) -> None:
    """As above with enough candidates that the rejections come from the capacity rows
    (`CapacityTable`, written at every change) and the policy scores in batches."""
    _check_cached_against_fresh(random.Random(seed), policy, True, nodes=80, steps=12)


def _check_cached_against_fresh(rng: random.Random, policy: PlacementPolicy, varied: bool, *, nodes: int, steps: int) -> None:
    cluster = Cluster([_node(rng, f"n{i}", varied=varied) for i in range(nodes)], policy=policy, mix=WorkloadMix())
    names = list(cluster.nodes) + ["missing"]
    probes = [_pod(rng, f"probe{i}") for i in range(6)]
    held: list[PodUid] = []
    for step in range(steps):
        pod = _pod(rng, f"p{step}")
        cluster.observe(pod)
        roll = rng.random()
        if roll < 0.55:
            placement = cluster.schedule(pod)
            if placement is not None:
                cluster.reserve(pod, placement)
                held.append(pod.uid)
        elif roll < 0.75 and held:
            cluster.release(held.pop(rng.randrange(len(held))))
        elif roll < 0.85:
            node = cluster.nodes[rng.choice(list(cluster.nodes))]
            if node.gpus:
                gpu = rng.choice(node.gpus)
                cluster.set_gpu_health(node.name, gpu.index, not gpu.healthy)
        fresh = _fresh(cluster.policy(), cluster.nodes.values())
        for probe in probes:
            many = cluster.evaluate_many(probe, names)
            for name in names:
                found = cluster.nodes.get(name)
                expected = FitFailure.UNKNOWN_NODE if found is None else fresh.evaluate(found, probe)
                assert cluster.evaluate(probe, name) == expected
                assert many[name] == expected


def _gpu(index: int, **fields: object) -> GpuState:
    gpu = GpuState(index, f"gpu-{index}", "T4", 16384)
    for name, value in fields.items():
        setattr(gpu, name, value)
    return gpu


# Two node states that differ in one thing a policy looks at; the per-state cache must tell them apart.
_TWINS: dict[str, tuple[dict[str, object], dict[str, object]]] = {
    "used compute": ({"used_milli": 300, "shares": 1}, {"used_milli": 600, "shares": 1}),
    "used GPU memory": ({"used_milli": 300, "used_memory_mib": 1024, "shares": 1}, {"used_milli": 300, "used_memory_mib": 12288, "shares": 1}),
    "shares": ({"used_milli": 600, "shares": 1}, {"used_milli": 600, "shares": 2}),
    "offline work": ({"used_milli": 300, "shares": 1}, {"used_milli": 300, "shares": 1, "offline_milli": 300}),
    "health": ({"used_milli": 300, "shares": 1}, {"used_milli": 300, "shares": 1, "healthy": False}),
}


@pytest.mark.parametrize("twin", list(_TWINS))
def test_states_that_differ_in_one_field_do_not_share_an_evaluation(twin: str) -> None:
    first, second = _TWINS[twin]
    probes = [
        PodRequest(PodUid(f"probe{core}"), (ContainerRequest.from_core("main", core, memory),), 1000, 1024, None, app_class)
        for core in (10, 30, 50, 100)
        for memory in (None, 8192)
        for app_class in (None, "offline")
    ]
    told_apart = False
    for policy in CACHEABLE:
        cluster = Cluster(policy=policy, mix=WorkloadMix(), fixed_mix=static_snapshot(probes))
        cluster.add_node(NodeState("a", [_gpu(0, **first), _gpu(1)], 64000, 262144, {LABEL_MAX_SHARES_PER_GPU: "2"}))
        cluster.add_node(NodeState("b", [_gpu(0, **second), _gpu(1)], 64000, 262144, {LABEL_MAX_SHARES_PER_GPU: "2"}))
        for probe in probes:
            expected = {n: _fresh(cluster.policy(), cluster.nodes.values()).evaluate(cluster.nodes[n], probe) for n in ("a", "b")}
            told_apart |= expected["a"] != expected["b"]
            assert cluster.evaluate(probe, "a") == expected["a"]
            assert cluster.evaluate(probe, "b") == expected["b"]
    assert told_apart, "no probe tells these states apart: the case tests nothing"


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 1_000_000), faithful=st.booleans())
def test_pods_that_differ_only_in_cpu_or_ram_get_their_own_answer(seed: int, faithful: bool) -> None:
    """The fragmentation policies memoise per node version by GPU request and CPU/RAM buckets:
    with CPU and RAM demands straddling the mix's cuts, every answer equals a fresh policy's."""
    rng = random.Random(seed)
    cpus, memories = [0, 1000, 4000, 6000, 8000, 16000], [0, 2048, 8192, 16384, 32768]

    def sized(uid: str, containers: tuple[ContainerRequest, ...], *, least: int = 0) -> PodRequest:
        cpu, memory = rng.choice(cpus[least:]), rng.choice(memories[least:])
        return PodRequest(PodUid(uid), containers, cpu, memory, None, rng.choice([None, "offline"]))

    families = [(ContainerRequest("main", 1, milli),) for milli in (100, 300, 700)] + [(ContainerRequest("main", 2, 1000),)]
    # no zero demand in the mix: a pod just fitting and one just not fitting share a bucket
    snapshot = static_snapshot([sized(f"mix{i}", rng.choice(families), least=1) for i in range(60)], epoch=1)
    gpus = [GpuState(i, f"g{i}", "T4", 16384) for i in range(4)]
    cluster = Cluster([NodeState("n", gpus, rng.choice([6000, 12000, 20000]), rng.choice([8192, 24576, 65536]))])
    for i in range(rng.randrange(4)):
        filler = sized(f"fill{i}", rng.choice(families))
        placement = cluster.schedule(filler)
        if placement is not None:
            cluster.reserve(filler, placement)
    node = cluster.nodes["n"]
    policy = FgdPolicy(snapshot) if faithful else FragmentationAwarePolicy(snapshot)
    for i in range(40):
        pod = sized(f"p{i}", rng.choice(families))
        fresh = FgdPolicy(snapshot) if faithful else FragmentationAwarePolicy(snapshot)
        assert policy.evaluate(node, pod) == fresh.evaluate(node, pod)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 1_000_000))
def test_certain_failure_is_what_host_fit_and_assign_report(seed: int) -> None:
    rng = random.Random(seed)
    node = _node(rng, "n")
    for gpu in node.gpus:
        used = rng.choice([0, 0, 300, 700, 1000])
        gpu.used_milli, gpu.used_memory_mib, gpu.shares = used, min(gpu.memory_mib, used * 16), int(0 < used < 1000)
        gpu.healthy = rng.random() < 0.85
    node.used_cpu_milli = rng.choice([0, 8000, 30000])
    pod = _pod(rng, "p")
    failure = certain_failure(capacity_of(node), pod)
    if failure is not None:
        actual = host_fit(node, pod)
        if actual is None:
            result = assign(node, pod, gpu_binpack)
            actual = result if isinstance(result, FitFailure) else None
        assert actual is failure


def _reference(measure: FragmentationMeasure, models: frozenset[str], free_cpu: int, free_memory: int, gpus: Sequence[GpuFree]) -> float:
    """The measure shape by shape, as FGD defines it."""
    idle = sum(f for f, _ in gpus)
    if idle == 0:
        return 0.0
    frag = 0.0
    for s in measure.shapes:
        if s.count == 0 or s.cpu > free_cpu or s.memory > free_memory or (s.models is not None and not (s.models & models)):
            frag += s.weight * idle
            continue
        stranded = fitting = 0
        for free, mem in gpus:
            if free < s.milli or mem < s.gpu_memory:
                stranded += free
            else:
                fitting += 1
        frag += s.weight * (idle if fitting < s.count else stranded)
    return frag


@pytest.mark.parametrize("faithful", [False, True])
def test_fragmentation_grouped_by_demand_is_bit_identical(faithful: bool) -> None:
    rng = random.Random(7)
    pods = [_pod(rng, f"p{i}") for i in range(400)]
    snapshot = static_snapshot(pods)
    measure = FragmentationMeasure(snapshot, faithful=faithful, weighting="multi")
    for _ in range(1000):
        gpus = [(rng.choice([0, 10, 250, 500, 750, 1000]), rng.choice([0, 4096, 16384, 32768])) for _ in range(rng.choice([1, 2, 4, 8]))]
        models = frozenset({rng.choice(["T4", "A100", "P100"])})
        free_cpu, free_memory = rng.choice([0, 2000, 8000, 64000]), rng.choice([0, 8192, 100000])
        assert measure.of(models, free_cpu, free_memory, gpus) == _reference(measure, models, free_cpu, free_memory, tuple(sorted(gpus)))
        changes = [(k, (max(f - 250, 0), max(m - 4096, 0))) for k, (f, m) in enumerate(gpus) if rng.random() < 0.7]
        fresh = FragmentationMeasure(snapshot, faithful=faithful, weighting="multi")  # every variant a memo miss
        for measured in (measure, fresh):
            variants = measured.of_variants(models, free_cpu, free_memory, gpus, changes)
            for (k, new), value in zip(changes, variants):
                after = list(gpus)
                after[k] = new
                assert value == _reference(measure, models, free_cpu, free_memory, tuple(sorted(after)))
