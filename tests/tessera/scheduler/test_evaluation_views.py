"""The extender's per-shape views never answer differently from evaluating the node afresh."""
from __future__ import annotations

import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st
from extender_harness import node_manifest, pod_manifest

from tessera.alloc import Cluster, FitFailure, PlacementPolicy, PodRequest, pod_request_from_k8s
from tessera.alloc.model import PodUid
from tessera.model.contract import ANNOTATION_NODE_GPUS
from tessera.scheduler.state import SchedulerState, StateSettings

NODES = ["n0", "n1", "n2"]
_op = st.one_of(
    st.tuples(st.just("bind"), st.sampled_from([10, 30, 50, 100, 200]), st.sampled_from(NODES)),
    st.tuples(st.just("release"), st.integers(0, 30), st.just("")),
    st.tuples(st.just("health"), st.integers(0, 1), st.sampled_from(NODES)),
    st.tuples(st.just("observe"), st.sampled_from([5, 60, 100]), st.just("")),
)


def _state(policy: PlacementPolicy) -> SchedulerState:
    state = SchedulerState(Cluster(policy=policy), StateSettings(), clock=time.time)
    for name in NODES:
        state.apply_node(node_manifest(name, gpus=2))
    return state


def _request(name: str, core: int) -> PodRequest:
    pod = pod_manifest(name, ("main", core, None))
    pod["metadata"]["uid"] = name
    return pod_request_from_k8s(pod)


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(_op, max_size=25), policy=st.sampled_from([PlacementPolicy.FRAGMENTATION_AWARE, PlacementPolicy.BINPACK]))
def test_views_agree_with_fresh_evaluation(ops: list[tuple[str, int, str]], policy: PlacementPolicy) -> None:
    state = _state(policy)
    probes = [_request(f"probe{core}", core) for core in (20, 50, 100, 200)]
    bound: list[PodUid] = []
    for i, (kind, value, node) in enumerate(ops):
        with state.lock:
            for probe in probes:  # keep views alive across changes, as a busy extender does
                state.evaluations(probe, NODES)
        if kind == "bind":
            request = _request(f"p{i}", value)
            state.observe_once(request)
            if not isinstance(state.reserve_for_bind(request, node), FitFailure):
                state.finish_bind(request.uid, bound=True)
                bound.append(request.uid)
        elif kind == "release" and bound:
            state.release_pod(bound.pop(value % len(bound)))
        elif kind == "health":
            manifest = node_manifest(node, gpus=2)
            gpus = json.loads(manifest["metadata"]["annotations"][ANNOTATION_NODE_GPUS])
            gpus[value]["healthy"] = False
            manifest["metadata"]["annotations"][ANNOTATION_NODE_GPUS] = json.dumps(gpus)
            state.apply_node(manifest)
        elif kind == "observe":
            state.observe_once(_request(f"o{i}", value))

    fresh = Cluster(policy=policy, mix=state.cluster.mix)
    for name, node_state in state.cluster.nodes.items():
        fresh.nodes[name] = node_state  # same objects: only the caches differ
    with state.lock:
        for probe in probes:
            viewed = state.evaluations(probe, NODES)
            direct = {n: fresh.policy().evaluate(state.cluster.nodes[n], probe) for n in NODES}
            assert viewed == direct


def test_a_view_answers_the_names_asked_and_no_others() -> None:
    """A view that knows every node must not leak the others into an answer for fewer (the
    prioritize scores are scaled over exactly the candidates), duplicates in the request included."""
    state = _state(PlacementPolicy.FRAGMENTATION_AWARE)
    probe = _request("probe", 50)
    with state.lock:
        assert set(state.evaluations(probe, NODES)) == set(NODES)
        assert set(state.evaluations(probe, ["n1"])) == {"n1"}
        assert set(state.evaluations(probe, ["n1", "n1", "n2"])) == {"n1", "n2"}
