"""The evaluation cache's maps, the fragmentation policies' memos and the workload mix's shape
weights stay within their byte budgets whatever pod shapes and node states the traffic brings,
and the sizes the budgets are estimated with are upper bounds of what tracemalloc measures.

Each adversarial case would hold many times its budget without one (thousands of pod shapes,
node versions, or shapes naming hundreds of long GPU models); the memory the cache holds is
measured with tracemalloc (what dropping the cache gives back)."""
from __future__ import annotations

import gc
import random
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast

import pytest

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PlacementPolicy, PodRequest, PodUid, static_snapshot
from tessera.alloc.evaluation_cache import RESULT_BYTES, STATE_BYTES, STATE_GPU_BYTES, EvaluationBudget, EvaluationCache
from tessera.alloc.frag_policy import FragmentationAwarePolicy
from tessera.alloc.frag_settings import FragMemoBudget
from tessera.alloc.frag_simple import MEMO_RESULT_BYTES, memo_result_bytes
from tessera.alloc.fragmentation import MEMO_BYTES, MEMO_GPU_BYTES, ROW_BYTES, ROWS_BYTES, FragmentationMeasure
from tessera.alloc.interning import SLOT_BYTES, IdTable, approx_bytes
from tessera.alloc.workload import MixSettings, WorkloadMix

KiB = 1024
BUDGET = 256 * KiB  # every map's, in these tests
NODES = 100


def _pod(i: int, *, containers: int = 1, models: frozenset[str] | None = None) -> PodRequest:
    """A share shape of its own (the GPU memory differs from pod to pod)."""
    return PodRequest(
        PodUid(f"p{i}"),
        tuple(ContainerRequest(f"c{c}", 1, 100 + 10 * (i % 80), 1 + i) for c in range(containers)),
        gpu_models=models,
    )


def _cluster(policy: PlacementPolicy, seed: int = 7) -> Cluster:
    """NODES 8-GPU nodes loaded at random, so that their states differ."""
    rng = random.Random(seed)
    cluster = Cluster(policy=policy)
    for n in range(NODES):
        cluster.add_node(NodeState(f"node-{n:03d}", [GpuState(g, f"GPU-{n}-{g}", "T4", 15360) for g in range(8)]))
    for i in range(NODES * 6):
        pod = PodRequest(PodUid(f"fill{i}"), (ContainerRequest("main", 1, rng.choice([100, 200, 300, 500, 1000])),))
        placement = cluster.place(pod, f"node-{rng.randrange(NODES):03d}")
        if placement is not None:
            cluster.reserve(pod, placement)
    return cluster


def _prepared(cluster: Cluster, budget: EvaluationBudget) -> EvaluationCache:
    cache = EvaluationCache(budget)
    for node in cluster.nodes.values():
        cache.prepare(node)
    return cache


Step = Callable[[EvaluationCache, Cluster, int], None]


def _all_nodes(cache: EvaluationCache, cluster: Cluster, i: int) -> None:
    """A new shape over every node (the capacity table's path): by-state results."""
    cache.evaluate_many(cluster.policy(), cluster.nodes, _pod(i), list(cluster.nodes))


def _few_nodes(cache: EvaluationCache, cluster: Cluster, i: int) -> None:
    """A new shape over fewer than 64 candidates at a time: results kept per node."""
    names = list(cluster.nodes)
    for start in range(0, len(names), 50):
        cache.evaluate_many(cluster.policy(), cluster.nodes, _pod(i), names[start : start + 50])


def _new_versions(cache: EvaluationCache, cluster: Cluster, i: int) -> None:
    """Every node changes (a bind or a release): new interned states."""
    for n, node in enumerate(cluster.nodes.values()):
        pod = PodRequest(PodUid(f"churn{i}-{n}"), (ContainerRequest("main", 1, 10 + i % 90),))
        placement = cluster.place(pod, node.name)
        if placement is not None:
            cluster.reserve(pod, placement)
        cache.prepare(node)


def _long_model_lists(cache: EvaluationCache, cluster: Cluster, i: int) -> None:
    """A shape naming 200 GPU models of 200 characters each (~60 KiB a key)."""
    models = frozenset(f"{i:06d}-{m:03d}-" + "x" * 190 for m in range(200))
    cache.evaluate_many(cluster.policy(), cluster.nodes, _pod(i, models=models), ["node-000", "node-001"])


@dataclass(frozen=True)
class Case:
    name: str
    step: Step
    steps: int
    unbounded_bytes: int  # what the targeted map would have held without a budget, by the same estimate


CASES = [
    Case("by_state", _all_nodes, 100, 100 * NODES * RESULT_BYTES),
    Case("per_node", _few_nodes, 100, 100 * NODES * RESULT_BYTES),
    Case("states", _new_versions, 40, 40 * NODES * (STATE_BYTES + 8 * STATE_GPU_BYTES)),
    Case("keys", _long_model_lists, 200, 200 * 60 * KiB),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_map_stays_within_its_byte_budget_under_adversarial_keys(case: Case) -> None:
    assert case.unbounded_bytes > 10 * BUDGET  # the case would overrun the budget tenfold
    cluster = _cluster(PlacementPolicy.BINPACK)
    budget = EvaluationBudget(by_state=BUDGET, per_node=BUDGET, states=BUDGET, keys=BUDGET)
    gc.collect()
    tracemalloc.start()
    try:
        cache = _prepared(cluster, budget)
        peak = 0
        for i in range(case.steps):
            case.step(cache, cluster, i)
            estimate = cache.estimated_bytes()
            assert estimate[case.name] <= BUDGET, (i, estimate)
            peak = max(peak, estimate[case.name])
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        del cache
        gc.collect()
        freed = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert peak > BUDGET // 2  # the traffic did fill the map: the bound was what held it
    # everything the cache held, all four maps with their budgets, the per-node summaries and
    # the capacity rows (~100 KiB for 100 nodes) included
    assert freed <= 4 * BUDGET + 256 * KiB, freed


@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.SPREAD, PlacementPolicy.FRAGMENTATION_AWARE])
def test_result_bytes_is_an_upper_bound_of_a_cached_result(policy: PlacementPolicy) -> None:
    """What one by-state result costs the cache (entry, key and evaluation): what dropping a cache
    of 100 shapes over 100 loaded nodes gives back, less what dropping one that evaluated
    nothing gives back, per result."""
    cluster = _cluster(policy)

    def freed_by_dropping(shapes: int) -> tuple[int, int]:
        gc.collect()
        tracemalloc.start()
        try:
            cache = _prepared(cluster, EvaluationBudget(by_state=1 << 40))
            for i in range(shapes):
                cache.evaluate_many(cluster.policy(), cluster.nodes, _pod(i), list(cluster.nodes))
            entries = cache.estimated_bytes()["by_state"] // RESULT_BYTES
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
            del cache
            gc.collect()
            return held - tracemalloc.get_traced_memory()[0], entries
        finally:
            tracemalloc.stop()

    baseline, _ = freed_by_dropping(0)
    freed, entries = freed_by_dropping(100)
    assert entries > 1000
    assert (freed - baseline) / entries <= RESULT_BYTES, (freed - baseline) / entries


def test_state_bytes_is_an_upper_bound_of_an_interned_state() -> None:
    """A node state no node holds any more costs the table what `STATE_BYTES` and
    `STATE_GPU_BYTES` estimate, or less: binds on 100 nodes, each new state interned."""
    cluster = _cluster(PlacementPolicy.BINPACK)
    rng = random.Random(11)

    def freed_by_dropping(binds: int) -> tuple[int, int]:
        gc.collect()
        tracemalloc.start()
        try:
            cache = _prepared(cluster, EvaluationBudget(states=1 << 40))
            for i in range(binds):
                name = f"node-{rng.randrange(NODES):03d}"
                pod = PodRequest(PodUid(f"state{binds}-{i}"), (ContainerRequest("main", 1, rng.choice([10, 20, 30, 50, 70])),))
                placement = cluster.place(pod, name)
                if placement is not None:
                    cluster.reserve(pod, placement)
                    cache.prepare(cluster.nodes[name])
            states = cache.estimated_bytes()["states"] // (STATE_BYTES + 8 * STATE_GPU_BYTES)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
            del cache
            gc.collect()
            return held - tracemalloc.get_traced_memory()[0], states
        finally:
            tracemalloc.stop()

    freed, states = freed_by_dropping(3000)
    live, nodes = freed_by_dropping(0)  # the same nodes, their current states only
    assert states - nodes > 1000
    assert (freed - live) / (states - nodes) <= STATE_BYTES + 8 * STATE_GPU_BYTES


@pytest.mark.parametrize(
    "value",
    [("fragmentation-aware", 3, (((1, 500, 2048),), 0, 0, None, None)), frozenset({"A100-SXM4-80GB", "H100"}), ("x" * 1000, (1, 2, 3))],
    ids=["shape-key", "models", "long-string"],
)
def test_id_table_estimates_are_upper_bounds(value: object) -> None:
    """`approx_bytes` + `SLOT_BYTES` is at least what remembering a value costs."""
    table = IdTable(limit=10_000, max_bytes=1 << 40)
    copies = [_copy(value, i) for i in range(2000)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for copy in copies:
            table.id_of(copy)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # the values themselves were allocated before: what the table adds is its slots and ids
    assert (after - before) / len(copies) <= SLOT_BYTES
    assert table.estimated_bytes == sum(SLOT_BYTES + approx_bytes(c) for c in copies)


def _copy(value: object, i: int) -> object:
    """A distinct value of the same shape."""
    if isinstance(value, frozenset):
        return frozenset({*value, str(i)})
    assert isinstance(value, tuple)
    return (*value, i)


def test_a_value_larger_than_the_budget_gets_an_id_and_is_not_kept() -> None:
    table = IdTable(limit=100, max_bytes=10 * KiB)
    small = table.id_of("small")
    huge = "x" * (20 * KiB)
    first, second = table.id_of(huge), table.id_of(huge)
    assert first != second  # not remembered: ids stay unique, nothing is held
    assert table.id_of("small") == small and len(table) == 1


# --- the fragmentation policies' memos and the workload mix -------------------------------------

MIX = static_snapshot([_pod(i) for i in range(20)] + [PodRequest(PodUid(f"w{i}"), (ContainerRequest("main", 2, 1000),)) for i in range(2)])
UNBOUNDED = FragMemoBudget(results=1 << 40, measure=1 << 40, memo_keys=1 << 40)


def _frag_policy(budget: FragMemoBudget, cluster: Cluster) -> FragmentationAwarePolicy:
    policy = FragmentationAwarePolicy(MIX, budget=budget)
    for node in cluster.nodes.values():
        policy.node_changed(node)
    return policy


def _random_gpus(rng: random.Random, count: int) -> list[tuple[int, int]]:
    """A node's free (milli, MiB) per GPU, each pair and int a new object, as binds leave them."""
    return [(rng.randrange(257, 1000), rng.randrange(300, 15360)) for _ in range(count)]


@dataclass(frozen=True)
class MemoCase:
    name: str
    steps: int
    make: Callable[[int, Cluster], object]  # the holder of the memo, with that byte budget
    step: Callable[[object, Cluster, int], None]
    estimate: Callable[[object], int]
    unbounded_bytes: int  # what the memo would have held without a budget, by the same estimate


def _results_step(policy: object, cluster: Cluster, i: int) -> None:
    """A new pod family (its GPU memory differs) over every node: a result per node version."""
    assert isinstance(policy, FragmentationAwarePolicy)
    policy.evaluate_many(list(cluster.nodes.values()), _pod(i))


def _measure_step(measure: object, cluster: Cluster, i: int) -> None:
    """20 node states the measure has not seen."""
    assert isinstance(measure, FragmentationMeasure)
    rng = random.Random(i)
    for _ in range(20):
        measure.of(frozenset({"T4"}), 64_000, 256_000, _random_gpus(rng, 8))


def _memo_keys_step(policy: object, cluster: Cluster, i: int) -> None:
    """A pod naming 200 GPU models of 200 characters each (~60 KiB a key), on two nodes."""
    assert isinstance(policy, FragmentationAwarePolicy)
    models = frozenset(f"{i:06d}-{m:03d}-" + "x" * 190 for m in range(200))
    nodes = list(cluster.nodes.values())[:2]
    policy.evaluate_many(nodes, _pod(i, models=models))


def _weights_step(mix: object, cluster: Cluster, i: int) -> None:
    """A new pod shape naming 50 GPU models of 50 characters each."""
    assert isinstance(mix, WorkloadMix)
    mix.observe(_pod(i, models=frozenset(f"{i:06d}-{m:03d}-" + "x" * 40 for m in range(50))))


MEMO_CASES = [
    MemoCase(
        "results", 100, lambda budget, cluster: _frag_policy(replace(UNBOUNDED, results=budget), cluster), _results_step,
        lambda policy: cast(FragmentationAwarePolicy, policy).estimated_bytes()["results"], 100 * NODES * MEMO_RESULT_BYTES,
    ),
    MemoCase(
        "measure", 150, lambda budget, cluster: FragmentationMeasure(MIX, max_bytes=budget), _measure_step,
        lambda measure: cast(FragmentationMeasure, measure).estimated_bytes, 150 * 20 * (MEMO_BYTES + 8 * MEMO_GPU_BYTES),
    ),
    MemoCase(
        "memo_keys", 100, lambda budget, cluster: _frag_policy(replace(UNBOUNDED, memo_keys=budget), cluster), _memo_keys_step,
        lambda policy: cast(FragmentationAwarePolicy, policy).estimated_bytes()["memo_keys"], 100 * 60 * KiB,
    ),
    MemoCase(
        "weights", 1000, lambda budget, cluster: WorkloadMix(MixSettings(shape_bytes=budget)), _weights_step,
        lambda mix: cast(WorkloadMix, mix).estimated_bytes, 1000 * 50 * 100,
    ),
]


@pytest.mark.parametrize("case", MEMO_CASES, ids=[c.name for c in MEMO_CASES])
def test_each_fragmentation_memo_stays_within_its_byte_budget_under_adversarial_keys(case: MemoCase) -> None:
    """The policy's results per node, the fragmentation measure's memo, the policy's interned
    memo keys and the workload mix's shape weights: traffic that would hold ten times the
    budget without one holds at most the budget by the estimate, and what tracemalloc sees the
    holder give back when dropped is within the budget plus what it holds besides (the node
    vectors of 100 nodes, the mix's shapes as arrays: under 1 MiB)."""
    assert case.unbounded_bytes > 10 * BUDGET  # the case would overrun the budget tenfold
    cluster = _cluster(PlacementPolicy.BINPACK)
    gc.collect()
    tracemalloc.start()
    try:
        holder = case.make(BUDGET, cluster)
        peak = 0
        for i in range(case.steps):
            case.step(holder, cluster, i)
            estimate = case.estimate(holder)
            assert estimate <= BUDGET, (i, estimate)
            peak = max(peak, estimate)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        del holder
        gc.collect()
        freed = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert peak > BUDGET // 2  # the traffic did fill the memo: the bound was what held it
    assert freed <= BUDGET + 1024 * KiB, freed


def _freed_by_dropping(make: Callable[[], object]) -> int:
    """What dropping the object `make` builds gives back (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        holder = make()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        del holder
        gc.collect()
        return held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


POD_KINDS: dict[str, Callable[[int], PodRequest]] = {
    "share": lambda i: _pod(i),
    "whole-gpu": lambda i: PodRequest(PodUid(f"g{i}"), (ContainerRequest("main", 1, 1000),), cpu_milli=i),
    "two-containers": lambda i: _pod(i, containers=2),
}


@pytest.mark.parametrize("families", [1, 20], ids=["one-per-memo", "twenty-per-memo"])
@pytest.mark.parametrize("kind", list(POD_KINDS))
def test_memo_result_bytes_is_an_upper_bound_of_a_memoised_result(kind: str, families: int) -> None:
    """What the policy's results cost per result: dropping a policy that evaluated `families`
    pod families over 100 loaded nodes, less dropping one that evaluated nothing, less what its
    fragmentation measure holds (multi-container pods take the scalar path, which fills it)."""
    cluster = _cluster(PlacementPolicy.BINPACK)
    nodes = list(cluster.nodes.values())
    pod = POD_KINDS[kind]
    estimates: dict[str, int] = {}

    def evaluated() -> FragmentationAwarePolicy:
        policy = _frag_policy(UNBOUNDED, cluster)
        for i in range(families):
            policy.evaluate_many(nodes, pod(i))
        estimates.update(policy.estimated_bytes())
        return policy

    baseline = _freed_by_dropping(lambda: _frag_policy(UNBOUNDED, cluster))
    freed = _freed_by_dropping(evaluated)
    size = memo_result_bytes(pod(0))
    results = estimates["results"] // size
    assert results >= NODES
    assert (freed - baseline - estimates["measure"]) / results <= size, (freed - baseline - estimates["measure"]) / results


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_measure_bytes_are_upper_bounds_of_a_memoised_value(gpus: int) -> None:
    """A value of the fragmentation measure for a node state it has not seen, every (free milli,
    free MiB) pair and set of models a new object (as `NodeState.models` gives them): what 2,000
    of them cost, against `MEMO_BYTES`, the set and `MEMO_GPU_BYTES` per GPU."""
    rng = random.Random(gpus)
    states = [_random_gpus(rng, gpus) for _ in range(2000)]

    def filled() -> FragmentationMeasure:
        measure = FragmentationMeasure(MIX, max_bytes=1 << 40)
        for state in states:
            measure.of(frozenset({"T4"}), 64_000, 256_000, [(f, m) for f, m in state])
        return measure

    baseline = _freed_by_dropping(lambda: FragmentationMeasure(MIX, max_bytes=1 << 40))
    freed = _freed_by_dropping(filled)
    estimate = MEMO_BYTES + sys.getsizeof(frozenset({"T4"})) + MEMO_GPU_BYTES * gpus
    assert (freed - baseline) / len(states) <= estimate, (freed - baseline) / len(states)


def test_rows_bytes_are_upper_bounds_of_compiled_rows() -> None:
    """Under a mix of 200 shapes of distinct CPU and RAM, each (CPU, RAM) bucket of one GPU
    vector is a new value and a new compiled entry: what they cost together, against the
    estimate of both."""
    shapes = [PodRequest(PodUid(f"s{i}"), (ContainerRequest("main", 1, 100 + i),), cpu_milli=100 * (i + 1), memory_mib=50 * (i + 1)) for i in range(200)]
    mix = static_snapshot(shapes)
    buckets = [(100 * i + 50, 500 * j + 25) for i in range(200) for j in range(20)]

    def filled() -> FragmentationMeasure:
        measure = FragmentationMeasure(mix, max_bytes=1 << 40)
        for cpu, memory in buckets:
            measure.of(frozenset({"T4"}), cpu, memory, [(500, 500)])
        return measure

    baseline = _freed_by_dropping(lambda: FragmentationMeasure(mix, max_bytes=1 << 40))
    freed = _freed_by_dropping(filled)
    estimate = MEMO_BYTES + MEMO_GPU_BYTES + ROWS_BYTES + ROW_BYTES * len(mix.shapes) + 2 * sys.getsizeof(frozenset({"T4"}))
    assert (freed - baseline) / len(buckets) <= estimate, (freed - baseline) / len(buckets)


@pytest.mark.parametrize("models", [0, 2, 50])
def test_weight_bytes_is_an_upper_bound_of_a_shape_weight(models: int) -> None:
    """What the workload mix keeps per new pod shape (its key and weight: the pods themselves
    are gone), against its estimate, for shapes naming no GPU models, two, or fifty."""

    estimates: list[int] = []

    def observed() -> WorkloadMix:
        mix = WorkloadMix(MixSettings(shape_bytes=1 << 40))
        for i in range(2000):
            names = frozenset({str(i), *(f"model-{m:03d}-" + "x" * 40 for m in range(models - 1))}) if models else None
            mix.observe(PodRequest(PodUid(f"w{i}"), (ContainerRequest("main", 1, 100 + i % 900, 1 + i),), cpu_milli=300 + i, memory_mib=7000 + i, gpu_models=names))
        estimates.append(mix.estimated_bytes)
        return mix

    freed = _freed_by_dropping(observed)
    assert freed <= estimates[0], (freed / 2000, estimates[0] / 2000)
