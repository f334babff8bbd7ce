"""Every fast path of every placement policy gives what the plain reference gives
(`Policy.reference_evaluate`, `tessera.alloc.reference`): the policy's own `evaluate` (memos,
the simple path), its `evaluate_many` (vectorised batches), and `Cluster.evaluate` /
`Cluster.evaluate_many` (`EvaluationCache`: certain rejections, per-node and by-state results,
`CapacityTable` from 64 candidates on).

Compared exactly, scores included: every path performs the reference's float operations in the
reference's order (the batch paths say how they keep to it), and the simulator replays through
the scalar path what the extender answers in batches, so a last-bit difference could move a pod."""
from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PlacementPolicy, PodRequest, PodUid
from tessera.alloc.frag_policy import FgdPolicy, FragmentationAwarePolicy
from tessera.alloc.model import AppClass
from tessera.alloc.policy import Evaluation, RandomPolicy
from tessera.model.contract import LABEL_GPU_PLACEMENT, LABEL_MAX_SHARES_PER_GPU

MODELS = ("T4", "A100", "P100")


@st.composite
def _gpus(draw: st.DrawFn, name: str) -> list[GpuState]:
    """A node's GPUs: one memory size, mostly one model, partly used, now and then a sick one or
    one holding offline work."""
    count = draw(st.sampled_from([1, 2, 4, 8]))
    memory = draw(st.sampled_from([16384, 32768]))
    model = draw(st.sampled_from(MODELS))
    gpus = []
    for i in range(count):
        used = draw(st.sampled_from([0, 0, 0, 110, 250, 333, 500, 750, 1000]))
        gpu = GpuState(i, f"{name}-{i}", draw(st.sampled_from([model] * 9 + ["P100"])), memory)
        gpu.used_milli, gpu.shares = used, int(0 < used < 1000)
        gpu.used_memory_mib = min(memory, used * draw(st.sampled_from([0, 8, 16])))
        gpu.healthy = draw(st.sampled_from([True] * 19 + [False]))
        gpu.offline_milli = used if used and draw(st.sampled_from([False] * 19 + [True])) else 0
        gpus.append(gpu)
    return gpus


@st.composite
def _node(draw: st.DrawFn, name: str) -> NodeState:
    labels: dict[str, str] = {}
    placement = draw(st.sampled_from([None] * 8 + ["binpack", "spread"]))
    if placement is not None:
        labels[LABEL_GPU_PLACEMENT] = placement
    if draw(st.sampled_from([False] * 9 + [True])):
        labels[LABEL_MAX_SHARES_PER_GPU] = "2"
    node = NodeState(name, draw(_gpus(name)), draw(st.sampled_from([None, 32000, 96000])), draw(st.sampled_from([None, 262144])), labels)
    node.used_cpu_milli = draw(st.sampled_from([0, 8000, 28000]))
    node.used_memory_mib = draw(st.sampled_from([0, 65536]))
    return node


_container = st.one_of(
    st.just(ContainerRequest("main", 0, 0)),  # CPU only
    st.builds(ContainerRequest, st.just("main"), st.sampled_from([1, 2, 4, 8]), st.just(1000)),  # whole GPUs
    st.builds(  # a share, with or without GPU memory
        ContainerRequest, st.just("main"), st.just(1), st.sampled_from([37, 50, 110, 250, 333, 500, 990]), st.sampled_from([None, 4096, 20000])
    ),
)


@st.composite
def _pod(draw: st.DrawFn, uid: str) -> PodRequest:
    main = draw(_container)
    containers = (main,) if draw(st.sampled_from([True] * 9 + [False])) else (main, ContainerRequest("side", 1, 300))
    app_class: AppClass | None = draw(st.sampled_from([None, None, "online", "offline"]))
    return PodRequest(
        PodUid(uid),
        containers,
        draw(st.sampled_from([0, 1000, 4000, 16000, 64000])),
        draw(st.sampled_from([0, 2048, 16384, 100000])),
        draw(st.sampled_from([None, None, None, frozenset({"T4"}), frozenset({"A100", "P100"})])),
        app_class,
    )


@st.composite
def _scenario(draw: st.DrawFn) -> tuple[list[NodeState], list[PodRequest], list[PodRequest]]:
    """Nodes (up to 12 kinds, each in copies: 8 states and more take the policies' batch path, 64
    candidates and more the `CapacityTable` path, copies in one state share by-state results), the pods that taught the
    mix, and the pods that arrive."""
    kinds = [draw(_node(f"kind{k}")) for k in range(draw(st.integers(4, 12)))]
    copies = draw(st.sampled_from([1, 3, 16]))
    nodes = []
    for k, kind in enumerate(kinds):
        for c in range(copies):
            node = copy.deepcopy(kind)
            node.name = f"n{k}-{c}"
            nodes.append(node)
    mix = [draw(_pod(f"mix{i}")) for i in range(draw(st.integers(4, 12)))]
    arrivals = [draw(_pod(f"p{i}")) for i in range(draw(st.integers(1, 6)))]
    return nodes, mix, arrivals


def _cluster(nodes: Sequence[NodeState], mix: Sequence[PodRequest], policy: PlacementPolicy) -> Cluster:
    cluster = Cluster(copy.deepcopy(list(nodes)), policy=policy)
    for pod in mix:
        cluster.observe(pod)
    cluster.policy()  # introduced to the inventory before any request, in each cluster alike
    return cluster


CACHEABLE = [p for p in PlacementPolicy if p is not PlacementPolicy.RANDOM]


@pytest.mark.parametrize("policy", CACHEABLE, ids=[p.value for p in CACHEABLE])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=_scenario())
def test_every_fast_path_gives_the_reference_evaluation(policy: PlacementPolicy, scenario: tuple[list[NodeState], list[PodRequest], list[PodRequest]]) -> None:
    """Three clusters in the same state, each asked one way: all nodes at once (`batched`), node
    by node through the cache (`single`), the policy object directly (`direct`, whose reference
    is the yardstick). Each arriving pod is then bound where `batched` puts it, in all three, so
    later pods meet changed nodes, new versions and a moved mix."""
    nodes, mix, arrivals = scenario
    batched, single, direct = (_cluster(nodes, mix, policy) for _ in range(3))
    names = [node.name for node in nodes]
    for pod in arrivals:
        impl = direct.policy()
        reference = {name: impl.reference_evaluate(direct.nodes[name], pod) for name in names}
        assert batched.evaluate_many(pod, names) == reference
        assert {name: single.evaluate(pod, name) for name in names} == reference
        # the policy alone: first every node at once (its batch path), then node by node
        assert dict(zip(names, impl.evaluate_many([direct.nodes[name] for name in names], pod))) == reference
        assert {name: impl.evaluate(direct.nodes[name], pod) for name in names} == reference
        # the memos and caches now hold this pod's results: asked again, they still agree
        assert batched.evaluate_many(pod, names) == reference
        if isinstance(impl, (FgdPolicy, FragmentationAwarePolicy)):
            # the increases too, to the last bit: a score band hides most differences, yet a
            # band edge can fall between two of them. The direct policy's batch evaluated every
            # node; in the clusters a node whose state was evaluated already is answered by the
            # cache, the others went to the policy's batch (`batched`) or its scalar path (`single`).
            for name in names:
                increase = impl.reference_increase(direct.nodes[name], pod)
                assert impl.memoised(direct.nodes[name], pod) == increase
                for cluster in (batched, single):
                    assert cluster.policy().memoised(cluster.nodes[name], pod) in (None, increase)  # type: ignore[attr-defined]
        # the same calls in every cluster: what a policy settles on its first read (reservations,
        # model pressure) depends on when it is read
        for cluster in (batched, single, direct):
            cluster.observe(pod)
        placements = [cluster.schedule(pod) for cluster in (batched, single, direct)]
        assert placements[1:] == placements[:1] * 2
        if placements[0] is not None:
            for cluster in (batched, single, direct):
                cluster.reserve(pod, placements[0])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=_scenario(), seed=st.integers(0, 2**32))
def test_the_random_baseline_draws_as_its_plain_evaluation_does(seed: int, scenario: tuple[list[NodeState], list[PodRequest], list[PodRequest]]) -> None:
    """Nothing caches the random baseline: the cluster's answers are the draws of a policy of
    the same seed asked node by node in the same order."""
    nodes, mix, arrivals = scenario
    cluster = Cluster(copy.deepcopy(nodes), policy=PlacementPolicy.RANDOM, seed=seed)
    plain = RandomPolicy(seed)
    names = [node.name for node in nodes]
    for pod in arrivals:
        expected = {name: plain.reference_evaluate(cluster.nodes[name], pod) for name in names}
        assert cluster.evaluate_many(pod, names) == expected
