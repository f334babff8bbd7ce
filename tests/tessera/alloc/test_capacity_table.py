"""The rejections made in one numpy pass over many nodes are `Demand.reject`'s, node by node."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.alloc import ContainerRequest, FitFailure, GpuState, NodeState, PodRequest, PodUid
from tessera.alloc.assign import Demand, capacity_of
from tessera.alloc.capacity_table import CPU, GPU, MEMORY, PASS, UNDECIDED, CapacityTable
from tessera.model.contract import LABEL_MAX_SHARES_PER_GPU

_CODE = {None: PASS, FitFailure.CPU: CPU, FitFailure.MEMORY: MEMORY, FitFailure.GPU: GPU}


def _node(rng: random.Random, name: str) -> NodeState:
    gpus = [GpuState(i, f"{name}-{i}", "T4", rng.choice([16384, 32768])) for i in range(rng.choice([0, 1, 2, 8]))]
    for gpu in gpus:
        used = rng.choice([0, 0, 150, 500, 990, 1000])
        gpu.used_milli, gpu.used_memory_mib, gpu.shares = used, min(gpu.memory_mib, used * 20), int(0 < used < 1000) * rng.choice([1, 2])
        gpu.healthy = rng.random() < 0.9
    labels = {LABEL_MAX_SHARES_PER_GPU: "1"} if rng.random() < 0.2 else {}
    node = NodeState(name, gpus, rng.choice([None, 32000, 96000]), rng.choice([None, 65536]), labels)
    node.used_cpu_milli = rng.choice([0, 8000, 30000])
    node.used_memory_mib = rng.choice([0, 16384, 60000])
    return node


def _pod(rng: random.Random) -> PodRequest:
    containers = [
        ContainerRequest("c0", rng.choice([1, 2, 8]), 1000)
        if rng.random() < 0.4
        else ContainerRequest("c0", 1, rng.choice([10, 150, 500, 860, 990]), rng.choice([None, 0, 8192, 20000]))
    ]
    if rng.random() < 0.2:
        containers.append(ContainerRequest("c1", 1, rng.choice([100, 600]), None))
    return PodRequest(PodUid("p"), tuple(containers), rng.choice([0, 4000, 40000, 70000]), rng.choice([0, 16384, 100000]))


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 1_000_000))
def test_codes_are_what_demand_reject_says_node_by_node(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [_node(rng, f"n{i}") for i in range(rng.randrange(1, 40))]
    table = CapacityTable(size=4)  # small, so that it grows
    for node in nodes:
        table.set(node.name, capacity_of(node))
    names = [node.name for node in nodes] + ["never-set"]
    for _ in range(5):
        demand = Demand.of(_pod(rng))
        codes = table.lookup(names, demand)[0].tolist()
        assert codes == [_CODE[demand.reject(capacity_of(node))] for node in nodes] + [UNDECIDED]


def test_a_forgotten_node_is_undecided_until_set_again() -> None:
    rng = random.Random(7)
    node = _node(rng, "n0")
    node.used_cpu_milli, node.cpu_milli = 0, 1000  # rejects any pod asking more CPU
    table = CapacityTable()
    table.set("n0", capacity_of(node))
    demand = Demand(4000, 0, None, 0, 0, -1)
    assert table.lookup(["n0"], demand)[0].tolist() == [CPU]
    table.forget("n0")
    assert table.lookup(["n0"], demand)[0].tolist() == [UNDECIDED]
    table.set("n0", capacity_of(node))
    assert table.lookup(["n0"], demand)[0].tolist() == [CPU]


def test_lookup_gives_the_state_of_a_current_row_only() -> None:
    """The by-state cache is read straight from these states: a forgotten or never-set node must
    come back -1 (so it goes the per-node way), and a new `set` replaces the state."""
    rng = random.Random(11)
    node = _node(rng, "n0")
    table = CapacityTable(size=1)  # grows on the second name: the states must survive it
    table.set("n0", capacity_of(node), 41)
    table.set("n1", capacity_of(node))
    demand = Demand(0, 0, None, 0, 0, -1)
    assert table.lookup(["n0", "n1", "never-set"], demand)[1].tolist() == [41, -1, -1]
    table.forget("n0")
    assert table.lookup(["n0"], demand)[1].tolist() == [-1]
    table.set("n0", capacity_of(node), 42)
    assert table.lookup(["n0"], demand)[1].tolist() == [42]
