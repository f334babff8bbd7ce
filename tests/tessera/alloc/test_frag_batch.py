"""The vectorised fragmentation path gives what the one-node-at-a-time path gives, bit for bit:
the extender answers in batches while `tessera sim` replays node by node, and a float that
differs in its last digit can move a pod."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PlacementPolicy, PodRequest, PodUid, WorkloadMix, static_snapshot
from tessera.alloc import frag_batch, frag_simple
from tessera.alloc.frag_batch import measure_many
from tessera.alloc.frag_policy import FgdPolicy, FragmentationAwarePolicy
from tessera.alloc.fragmentation import FragmentationMeasure, HostDemand
from tessera.alloc.workload import MixSnapshot
from tessera.model.contract import LABEL_GPU_PLACEMENT, LABEL_MAX_SHARES_PER_GPU

MODELS = ["T4", "A100", "P100"]


def _pod(rng: random.Random, uid: str) -> PodRequest:
    kind = rng.random()
    if kind < 0.1:  # CPU only
        container = ContainerRequest("main", 0, 0)
    elif kind < 0.35:
        container = ContainerRequest("main", rng.choice([1, 2, 4, 8]), 1000)
    else:
        container = ContainerRequest("main", 1, rng.choice([37, 50, 110, 250, 333, 500, 990]), rng.choice([None, None, 4096, 20000]))
    containers = (container,) if rng.random() < 0.9 else (container, ContainerRequest("side", 1, 300))
    return PodRequest(
        PodUid(uid),
        containers,
        rng.choice([0, 1000, 4000, 16000, 64000]),
        rng.choice([0, 2048, 16384, 100000]),
        rng.choice([None, None, None, frozenset({"T4"})]),
        rng.choice([None, None, None, "offline"]),
    )


def _node(rng: random.Random, name: str) -> NodeState:
    """A node part used: GPUs with shares, whole GPUs, idle ones, now and then a sick one."""
    model = rng.choice(MODELS)
    count = rng.choice([1, 2, 4, 8, 8])
    memory = rng.choice([16384, 32768])
    gpus = []
    for i in range(count):
        used = rng.choice([0, 0, 0, 110, 250, 333, 500, 750, 1000])
        gpu = GpuState(i, f"{name}-{i}", model if rng.random() < 0.9 else "P100", memory)
        gpu.used_milli, gpu.used_memory_mib, gpu.shares = used, min(memory, used * rng.choice([8, 16])), int(0 < used < 1000)
        gpu.healthy = rng.random() < 0.95
        gpu.offline_milli = used if used and rng.random() < 0.05 else 0
        gpus.append(gpu)
    labels: dict[str, str] = {}
    if rng.random() < 0.1:
        labels[LABEL_GPU_PLACEMENT] = rng.choice(["binpack", "spread"])
    if rng.random() < 0.1:
        labels[LABEL_MAX_SHARES_PER_GPU] = "2"
    node = NodeState(name, gpus, rng.choice([None, 32000, 96000]), rng.choice([None, 262144]), labels)
    node.used_cpu_milli = rng.choice([0, 8000, 28000])
    node.used_memory_mib = rng.choice([0, 65536])
    return node


def _mix(rng: random.Random) -> MixSnapshot:
    # odd counts and shares: expectations with many decimals, so rounding slips show
    return static_snapshot([_pod(rng, f"mix{i}") for i in range(rng.choice([7, 41, 199]))], epoch=1)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 1_000_000), faithful=st.booleans())
def test_measure_many_equals_the_scalar_measure(seed: int, faithful: bool) -> None:
    """Vectors of different lengths (padding), pods limited to GPU models, CPU/RAM on both sides
    of the shapes' demands."""
    rng = random.Random(seed)
    measure = FragmentationMeasure(_mix(rng), faithful=faithful, weighting=rng.choice(["pods", "multi", "gpu"]))
    items = []
    for _ in range(rng.choice([1, 7, 60])):
        gpus = [(rng.choice([0, 10, 110, 250, 500, 750, 1000]), rng.choice([0, 4096, 16384, 32768])) for _ in range(rng.choice([1, 2, 4, 8]))]
        items.append((frozenset(rng.sample(MODELS, rng.choice([1, 2]))), rng.choice([-1000, 0, 2000, 8000, 64000]), rng.choice([0, 8192, 100000]), gpus))
    assert measure_many(measure, items) == [measure.of(*item) for item in items]


def _fresh(policy: FgdPolicy | FragmentationAwarePolicy, nodes: list[NodeState]) -> FgdPolicy | FragmentationAwarePolicy:
    if isinstance(policy, FragmentationAwarePolicy):
        fresh = FragmentationAwarePolicy(policy.snapshot, policy.settings)
        for node in nodes:
            fresh.node_changed(node)
        return fresh
    return FgdPolicy(policy.snapshot)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 1_000_000), faithful=st.booleans())
def test_a_batch_of_nodes_gets_what_each_node_gets_alone(seed: int, faithful: bool) -> None:
    """`evaluate_many` on 40-80 nodes (vectorised where the pod and node allow) against
    `evaluate` node by node on a policy with empty memos: the same key, the same GPUs, the same
    failure, for CPU-only, whole-GPU, share, multi-container, model-limited and offline pods."""
    rng = random.Random(seed)
    nodes = [_node(rng, f"n{i}") for i in range(rng.randrange(40, 80))]
    snapshot = _mix(rng)
    batched: FgdPolicy | FragmentationAwarePolicy = FgdPolicy(snapshot) if faithful else FragmentationAwarePolicy(snapshot)
    if isinstance(batched, FragmentationAwarePolicy):
        for node in nodes:
            batched.node_changed(node)
    for i in range(8):
        pod = _pod(rng, f"p{i}")
        single = _fresh(batched, nodes)
        assert batched.evaluate_many(nodes, pod) == [single.evaluate(node, pod) for node in nodes]
        for node in nodes:  # the raw increases too, to the last bit (a band edge can turn on one)
            assert batched.memoised(node, pod) == single.memoised(node, pod)
        # and again, now from the memos the batch filled
        assert batched.evaluate_many(nodes, pod) == [single.evaluate(node, pod) for node in nodes]


@pytest.mark.parametrize("whole", [False, True])
def test_the_vectorised_path_runs_for_a_pod_on_many_nodes(monkeypatch: pytest.MonkeyPatch, whole: bool) -> None:
    """Guards the test above against passing only because everything fell back to the scalar path."""
    measured: list[int] = []
    shape_sum = frag_batch.shape_sum

    def spy(measure: FragmentationMeasure, fitting: np.ndarray, stranded: np.ndarray, idle: np.ndarray, *rest: Any) -> np.ndarray:
        measured.append(len(idle))
        return shape_sum(measure, fitting, stranded, idle, *rest)

    monkeypatch.setattr(frag_batch, "shape_sum", spy)  # whole GPUs: VectorBatch, through _expectation
    monkeypatch.setattr(frag_simple, "shape_sum", spy)  # shares
    rng = random.Random(3)
    nodes = [NodeState(f"n{i}", [GpuState(k, f"g{i}{k}", "T4", 16384, used_milli=rng.choice([0, 0, 300, 700]), shares=1) for k in range(8)], 64000, 262144) for i in range(50)]
    pod = PodRequest(PodUid("p"), (ContainerRequest("main", 2, 1000) if whole else ContainerRequest("main", 1, 250),), 1000, 1024)
    policy = FragmentationAwarePolicy(static_snapshot([pod]))
    assert all(not isinstance(r, str) for r in policy.evaluate_many(nodes, pod))
    assert measured == [measured[0]] and measured[0] >= 50  # one pass, one item per node at least


@pytest.mark.parametrize("policy", [PlacementPolicy.FRAGMENTATION_AWARE, PlacementPolicy.FGD])
def test_cluster_answers_many_nodes_at_once_as_it_answers_each(policy: PlacementPolicy) -> None:
    """The cluster's cache hands the nodes no cache answers to the policy in one batch, one per
    distinct node state; every answer equals the uncached one, through binds and releases."""
    rng = random.Random(11)
    cluster = Cluster([_node(rng, f"n{i}") for i in range(60)], policy=policy, mix=WorkloadMix())
    # twins: same state under another name, answered once per state
    for i in range(10):
        twin = cluster.nodes[f"n{i}"]
        cluster.add_node(NodeState(f"twin{i}", [GpuState(g.index, f"t{i}{g.index}", g.model, g.memory_mib) for g in twin.gpus], twin.cpu_milli, twin.memory_mib, dict(twin.labels)))
    names = list(cluster.nodes)
    held = []
    for step in range(40):
        pod = _pod(rng, f"s{step}")
        cluster.observe(pod)
        placement = cluster.schedule(pod)
        if placement is not None and rng.random() < 0.8:
            cluster.reserve(pod, placement)
            held.append(pod.uid)
        elif held:
            cluster.release(held.pop(rng.randrange(len(held))))
        probe = _pod(rng, f"probe{step}")
        many = cluster.evaluate_many(probe, names)
        single = _fresh(cluster.policy(), list(cluster.nodes.values()))  # type: ignore[arg-type]
        if isinstance(single, FragmentationAwarePolicy):
            live = cluster.policy()
            assert isinstance(live, FragmentationAwarePolicy)
            single._reserve._active, single._reserve._settled = live._reserve.active, True
            live._pressure.cost("")
            single._pressure._protected, single._pressure._settled = live._pressure._protected, True
        assert many == {name: single.evaluate(cluster.nodes[name], probe) for name in names}


@settings(max_examples=60, deadline=None)
@given(
    cpu_per_milli=st.sampled_from([0.0, 7.123456789, 16.7, 31.3]),
    memory_per_milli=st.sampled_from([0.0, 33.3333, 131.07]),
    nodes=st.lists(st.tuples(st.integers(-2000, 8000), st.integers(-8000, 128000), st.integers(-100000, 1_000_000)), min_size=1, max_size=40),
    pod=st.tuples(st.integers(0, 8000), st.integers(0, 128000), st.integers(0, 500000)),
)
def test_host_stranding_of_many_nodes_equals_the_scalar_one(
    cpu_per_milli: float, memory_per_milli: float, nodes: list[tuple[int, int, int]], pod: tuple[int, int, int]
) -> None:
    """The fragmentation-aware score adds `host_weight` x this to the increase before banding:
    the batch must give the scalar float, negative free CPU/RAM (over-committed nodes) included."""
    host = HostDemand(cpu_per_milli, memory_per_milli)
    gpu, cpu, memory = pod
    many = host.unfed_increase_many([g for g, _, _ in nodes], [c for _, c, _ in nodes], [m for _, _, m in nodes], gpu, cpu, memory).tolist()
    assert many == [host.unfed(g - gpu, c - cpu, m - memory) - host.unfed(g, c, m) for g, c, m in nodes]
    assert all(type(value) is float for value in many)


def _first_minimum_reference(rows: list[int], positions: list[int], values: list[float], count: int) -> list[tuple[int, float] | None]:
    """The scalar path's choice: per row, the first position of the lowest `round(value, 6)`."""
    out: list[tuple[int, float] | None] = [None] * count
    for row, position, value in sorted(zip(rows, positions, values)):
        rounded = round(value, 6)
        found = out[row]
        if found is None or rounded < found[1]:
            out[row] = (position, rounded)
    return out


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=5),
            st.integers(min_value=0, max_value=7),
            st.sampled_from([0.0, -0.0, 12.5, 1234.5678905, 99999.0000004]),
            st.integers(min_value=-30, max_value=30),
        ),
        max_size=40,
        unique_by=lambda e: (e[0], e[1]),
    )
)
def test_first_minimum_picks_what_the_scalar_loop_picks_near_rounding_ties(entries: list[tuple[int, int, float, int]]) -> None:
    # values a few tenths of a millionth apart: some round together, some do not; the items come
    # in any order (the batch's come row by row, position by position)
    rows = [row for row, _, _, _ in entries]
    positions = [position for _, position, _, _ in entries]
    values = [base + step * 1e-7 for _, _, base, step in entries]
    picked, lowest, best = frag_batch.first_minimum(np.array(rows, dtype=np.intp), np.array(positions, dtype=np.intp), np.array(values, dtype=np.float64), 6, 8)
    got: list[tuple[int, float] | None] = [None] * 6
    for row, position, value in zip(picked.tolist(), lowest.tolist(), best.tolist()):
        got[row] = (position, value)
    expected = _first_minimum_reference(rows, positions, values, 6)
    assert [(g[0], g[1], str(g[1])) if g else None for g in got] == [(e[0], e[1], str(e[1])) if e else None for e in expected]


@given(
    st.lists(
        st.one_of(
            st.floats(min_value=-1e7, max_value=1e7, allow_nan=False),
            # exact halves at the seventh decimal and their neighbours: where a product's rounding could mislead
            st.integers(min_value=-10**12, max_value=10**12).map(lambda k: (k + 0.5) / 1e6),
            st.integers(min_value=-10**12, max_value=10**12).map(lambda k: float(np.nextafter((k + 0.5) / 1e6, np.inf))),
        ),
        min_size=1,
        max_size=50,
    )
)
def test_round6_is_pythons_round_bit_for_bit(values: list[float]) -> None:
    got = frag_batch.round6(np.array(values, dtype=np.float64)).tolist()
    assert [(v, str(v)) for v in got] == [(round(v, 6), str(round(v, 6))) for v in values]


@given(st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=12), st.booleans())
def test_stack_lays_out_every_node_as_it_packed_itself(gpu_counts: list[int], uniform: bool) -> None:
    """Nodes of one GPU count are stacked by a reshape, mixed ones by an index scatter: both must
    put each node's host columns and GPU rows where the batch reads them, zero-padded."""
    counts = [gpu_counts[0]] * len(gpu_counts) if uniform else gpu_counts
    columns, rows_per_gpu = frag_simple.HOST_COLUMNS, frag_simple.GPU_ROWS
    packed = [np.arange(1000 * i, 1000 * i + columns + rows_per_gpu * c, dtype=np.int64) for i, c in enumerate(counts)]
    host, rows = frag_simple.stack([SimpleNamespace(packed=array) for array in packed])  # type: ignore[misc]
    width = max(1, max(counts))
    assert rows.shape == (len(counts), rows_per_gpu, width)
    for i, (array, c) in enumerate(zip(packed, counts)):
        assert host[i].tolist() == array[:columns].tolist()
        for r in range(rows_per_gpu):
            assert rows[i, r].tolist() == array[columns + r * c : columns + (r + 1) * c].tolist() + [0] * (width - c)


@pytest.mark.parametrize("ulps", [0, 2, -2])
@given(
    st.lists(
        st.one_of(
            st.floats(min_value=-1e7, max_value=1e7, allow_nan=False),
            # no change (exactly scale / 2), the 700 cut-off and its neighbours, large decreases (exactly scale)
            st.sampled_from([0.0, -0.0, 700_000.0, float(np.nextafter(700_000.0, 0)), float(np.nextafter(700_000.0, 1e9)), -1e6, 1e9]),
            # increases whose score lands on an integer in exact arithmetic: ln(scale / k - 1) x 1000
            st.integers(min_value=1, max_value=99).map(lambda k: 1000 * math.log(100 / k - 1)),
        ),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([100.0, 10.0, 7.5]),
)
def test_sigmoid_scores_are_the_scalar_scores_bit_for_bit(ulps: int, increases: list[float], scale: float) -> None:
    """Also with a vector exp a couple of ulps off the C library's (numpy's SIMD exp on some
    CPUs): the scores must not move."""
    def off(x: np.ndarray) -> np.ndarray:
        out = np.exp(x)
        for _ in range(abs(ulps)):
            out = np.nextafter(out, np.inf if ulps > 0 else -np.inf)
        return out

    with mock.patch.object(frag_batch, "_vector_exp", off if ulps else np.exp):
        got = frag_batch.sigmoid_scores(np.array(increases, dtype=np.float64), scale).tolist()
    assert got == [float(frag_batch.sigmoid_score(value, scale)) for value in increases]
