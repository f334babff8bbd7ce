"""The extender's watched view of dra pools counts what the API server holds, whatever order the
events arrive in: after any sequence of slice and claim changes, applied one event at a time, it
equals a view rebuilt from a fresh list of the same objects (what a relist does)."""
from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.alloc import PlacementPolicy
from tessera.kube.api import KubeObject, WatchEvent
from tessera.model.contract import DRA_DRIVER, NodeGpu
from tessera.model.pool_policy import PoolPolicy
from tessera.scheduler.dra_view import DraView
from tessera_node.dra.slices import slice_body, slice_spec

NODES = ("n1", "n2", "n3")


def _slice(name: str, node: str, gpus: int, generation: int, used: dict[int, int]) -> KubeObject:
    """A slice as the plugin publishes it (devices in its placement order), with a fixed name."""
    inventory = [NodeGpu(i, f"GPU-{node}-{i}", "T4", 16384) for i in range(gpus)]
    body = slice_body(node, slice_spec(node, inventory, PoolPolicy(), {}, generation, used), name=name)
    body["metadata"]["name"] = name
    return body


def _claim(name: str, node: str, index: int, cores: int | None) -> KubeObject:
    result: dict[str, Any] = {"request": "gpu", "driver": DRA_DRIVER, "pool": node, "device": f"gpu-{index}"}
    if cores is not None:
        result["consumedCapacity"] = {"cores": str(cores), "memory": "2048Mi"}
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "status": {"allocation": {"devices": {"results": [result]}}}}


slice_ops = st.tuples(
    st.just("slice"), st.sampled_from(["s1", "s2", "s3", "s1-new"]), st.sampled_from(NODES), st.integers(0, 3), st.integers(1, 3),
    st.dictionaries(st.integers(0, 2), st.integers(0, 100), max_size=3), st.booleans(),
)
claim_ops = st.tuples(
    st.just("claim"), st.sampled_from(["a", "b", "c", "d", "e"]), st.sampled_from(NODES), st.integers(0, 3),
    st.none() | st.integers(1, 100), st.booleans(), st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(slice_ops | claim_ops, max_size=40))
def test_events_one_by_one_equal_a_relist_of_the_same_objects(ops: list[tuple[Any, ...]]) -> None:
    view = DraView(PlacementPolicy.FRAGMENTATION_AWARE)
    view.replace_slices([])
    view.replace_claims([])
    slices: dict[str, KubeObject] = {}
    claims: dict[str, KubeObject] = {}
    for op in ops:
        if op[0] == "slice":
            _, name, node, gpus, generation, used, delete = op
            if delete and name in slices:
                view.slice_event(WatchEvent("DELETED", slices.pop(name)))
            elif gpus:
                body = _slice(name, node, gpus, generation, used)
                view.slice_event(WatchEvent("MODIFIED" if name in slices else "ADDED", body))
                slices[name] = body
        else:
            _, name, node, index, cores, whole, delete = op
            if delete and name in claims:
                view.claim_event(WatchEvent("DELETED", claims.pop(name)))
            else:
                body = _claim(name, node, index, None if whole else cores)
                view.claim_event(WatchEvent("MODIFIED" if name in claims else "ADDED", body))
                claims[name] = body
    fresh = DraView(PlacementPolicy.FRAGMENTATION_AWARE)
    fresh.replace_slices(list(slices.values()))
    fresh.replace_claims(list(claims.values()))
    assert view.counted() == fresh.counted()
    assert list(view.node_names()) == list(fresh.node_names())
    with view.lock, fresh.lock:
        assert view.cluster.usage() == fresh.cluster.usage()
        for node, state in fresh.cluster.nodes.items():
            assert [(g.index, g.used_milli, g.used_memory_mib) for g in view.cluster.nodes[node].gpus] == [
                (g.index, g.used_milli, g.used_memory_mib) for g in state.gpus
            ]


def test_a_claim_waits_for_its_node_and_a_newer_generation_wins() -> None:
    view = DraView(PlacementPolicy.BINPACK)
    view.replace_slices([])
    view.replace_claims([_claim("early", "n1", 1, 30)])
    assert view.counted() == {}, "its node has no slice yet"
    view.slice_event(WatchEvent("ADDED", _slice("old", "n1", 1, 1, {})))
    assert view.counted() == {}, "gpu-1 is not in the slice of generation 1"
    view.slice_event(WatchEvent("ADDED", _slice("new", "n1", 2, 2, {})))
    assert view.counted() == {"uid-early": ("n1", ((1, 300, 2048),))}
    view.slice_event(WatchEvent("DELETED", _slice("new", "n1", 2, 2, {})))
    assert view.counted() == {}, "back to the older slice, which lacks gpu-1"
