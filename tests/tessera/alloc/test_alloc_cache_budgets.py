"""The evaluation cache's maps stay within their byte budgets whatever pod shapes and node
states the traffic brings, and the sizes the budgets are estimated with are upper bounds of what
tracemalloc measures.

Each adversarial case would hold many times its budget without one (thousands of pod shapes,
node versions, or shapes naming hundreds of long GPU models); the memory the cache holds is
measured with tracemalloc (what dropping the cache gives back)."""
from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PlacementPolicy, PodRequest, PodUid
from tessera.alloc.evaluation_cache import RESULT_BYTES, STATE_BYTES, STATE_GPU_BYTES, EvaluationBudget, EvaluationCache
from tessera.alloc.interning import SLOT_BYTES, IdTable, approx_bytes

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
