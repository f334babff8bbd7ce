"""`Cluster` and `EvaluationCache` call a policy only through the `Policy` protocol: a policy
written from the protocol alone, subclassing nothing, is told about the inventory and the mix
and asked for evaluations. And the keys the caches pack into ints are unique per input."""
from __future__ import annotations

from collections.abc import Sequence
from itertools import product

import numpy as np
import pytest

from tessera.alloc import Cluster, ContainerRequest, GpuState, NodeState, PlacementPolicy, PodRequest, PodUid
from tessera.alloc.evaluation_cache import by_state_base
from tessera.alloc.frag_simple import HOST_FITS, host_fit_code, memo_key
from tessera.alloc.model import FitFailure
from tessera.alloc.policy import Evaluation, Policy
from tessera.alloc.workload import MixSnapshot


class _Recorder:
    """Scores every node 1.0 on its first GPU, and records what it was told."""

    name = PlacementPolicy.BINPACK
    cacheable = True
    standard_fit = True
    epoch = 0
    snapshot: MixSnapshot | None = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        self.calls.append(("evaluate", node.name))
        return Evaluation((1.0,), ((node.gpus[0].index,),))

    def evaluate_many(self, nodes: Sequence[NodeState], pod: PodRequest) -> list[Evaluation | FitFailure]:
        self.calls.append(("evaluate_many", ",".join(n.name for n in nodes)))
        return [Evaluation((1.0,), ((node.gpus[0].index,),)) for node in nodes]

    def reference_evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        return self.evaluate(node, pod)

    def node_changed(self, node: NodeState) -> None:
        self.calls.append(("node_changed", node.name))

    def node_removed(self, name: str) -> None:
        self.calls.append(("node_removed", name))

    def use_mix(self, snapshot: MixSnapshot) -> None:
        self.calls.append(("use_mix", f"{len(snapshot.shapes)} shapes"))


def _node(name: str, memory_mib: int = 16384) -> NodeState:
    return NodeState(name, [GpuState(0, f"{name}-0", "T4", memory_mib)])


def test_a_policy_written_from_the_protocol_alone_is_told_and_asked_through_it() -> None:
    cluster = Cluster([_node("a"), _node("b", 32768)])  # two states: the cache asks for both
    recorder = _Recorder()
    impl: Policy = recorder  # the protocol is all it implements
    cluster.install_policy(impl)
    assert recorder.calls == [("node_changed", "a"), ("node_changed", "b")]
    recorder.calls.clear()
    pod = PodRequest(PodUid("p"), (ContainerRequest("main", 1, 500),))
    cluster.observe(pod)
    assert cluster.evaluate_many(pod, ["a", "b"], PlacementPolicy.BINPACK) == {name: Evaluation((1.0,), ((0,),)) for name in "ab"}
    cluster.add_node(_node("c"))
    cluster.remove_node("a")
    assert recorder.calls == [("use_mix", "1 shapes"), ("evaluate_many", "a,b"), ("node_changed", "c"), ("node_removed", "a")]


@pytest.mark.parametrize(
    ("free_cpu", "free_memory", "expected"),
    [(4000, 2048, HOST_FITS), (4000, 2047, 2), (3999, 2048, 1), (3999, 2047, 0)],
)
def test_the_host_fit_code_says_which_of_cpu_and_ram_fit(free_cpu: int, free_memory: int, expected: int) -> None:
    assert host_fit_code(free_cpu, free_memory, 4000, 2048) == expected
    assert host_fit_code(np.array([free_cpu]), np.array([free_memory]), 4000, 2048).tolist() == [expected]


@pytest.mark.parametrize("bucket_count", [1, 4, 9])
def test_memo_keys_of_one_bucket_count_never_collide(bucket_count: int) -> None:
    inputs = list(product(range(5), range(4), range(bucket_count)))
    keys = [memo_key(family, fits, bucket, bucket_count) for family, fits, bucket in inputs]
    assert len(set(keys)) == len(inputs)
    arrays = memo_key(3, np.array([0, 1, 2, 3]), np.array([bucket_count - 1] * 4), bucket_count)
    assert arrays.tolist() == [memo_key(3, fits, bucket_count - 1, bucket_count) for fits in range(4)]


@pytest.mark.parametrize(("key", "state"), [(0, 0), (0, 2**40 - 1), (1, 0), (7, 123_456), (2**20, 2**39)])
def test_the_by_state_key_gives_back_its_policy_key_and_state(key: int, state: int) -> None:
    packed = by_state_base(key) | state
    assert (packed >> 40, packed & (2**40 - 1)) == (key, state)
