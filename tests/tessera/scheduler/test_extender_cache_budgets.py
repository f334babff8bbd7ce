"""The extender's memory per request is bounded: names of nodes it does not know are never kept,
the per-shape views stay within their byte budget whatever shapes and names arrive, and the notes
on unknown request fields stay small whatever field names a body carries.

Memory is measured with tracemalloc, in the extender's process, over the real HTTP server where
a request is involved (`extender_harness`)."""
from __future__ import annotations

import gc
import json
import random
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import pytest
from extender_harness import Harness, node_manifest, pod_manifest

from tessera.alloc import Cluster, FitFailure, PlacementPolicy, PodRequest, pod_request_from_k8s
from tessera.scheduler.evaluation_views import ENTRY_BYTES, EvaluationViews, ViewBudget
from tessera.scheduler.state import SchedulerState, StateSettings

KiB, MiB = 1024, 1024 * 1024


def _probe(name: str, core: int = 50, memory: int | None = None) -> dict[str, object]:
    pod = pod_manifest(name, ("main", core, memory))
    pod["metadata"]["uid"] = f"uid-{name}"
    return pod


_SERVER_CODE: Final = [tracemalloc.Filter(True, f"*/tessera/{package}/*") for package in ("scheduler", "alloc", "httpd")]


@pytest.mark.slow
@pytest.mark.parametrize(("verb", "requests", "unknown"), [("filter", 12, 100_000), ("prioritize", 10, 100_000)])
def test_requests_naming_unknown_nodes_leave_no_memory_behind(harness: Harness, verb: str, requests: int, unknown: int) -> None:
    """Each request names `unknown` nodes that do not exist (new ones each time) and one that
    does; the extender answers every one and keeps nothing of them: memory after the last
    request is within 1 MiB of memory after the first (it was ~12 MB more per request)."""
    harness.api.create_node(node_manifest("n1", gpus=2))
    service = harness.start()
    client = harness.client(service)
    # built before tracing starts: the client's memory is not the extender's
    bodies = [
        json.dumps({"Pod": _probe(f"p{r % 3}"), "NodeNames": [f"ghost-{r}-{i:06d}" for i in range(unknown)] + ["n1"]}).encode()
        for r in range(requests)
    ]
    gc.collect()
    tracemalloc.start()
    try:
        after_first: tracemalloc.Snapshot | None = None
        for r in range(requests):
            status, data = client.post_raw(f"/{verb}", bodies[r])
            bodies[r] = b""
            assert status == 200, data[:200]
            # checked on the bytes (decoding 100,000 entries here would be traced too)
            if verb == "filter":
                assert data.startswith(b'{"Nodes":null,"NodeNames":["n1"],"FailedNodes":{},"FailedAndUnresolvableNodes":{"ghost-')
            else:
                assert b'{"Host":"n1","Score":10}' in data
            assert data.count(b'"ghost-') == unknown
            del data
            if r == 0:  # collected only before a snapshot: a full collection per request over
                gc.collect()  # the whole suite's heap, traced, took minutes
                after_first = tracemalloc.take_snapshot().filter_traces(_SERVER_CODE)
        assert after_first is not None
        gc.collect()
        # what the server's own code holds on to: threads other tests left behind (a watch
        # winding down, a loopback API server closing) allocate elsewhere, at their own pace
        grown = sum(d.size_diff for d in tracemalloc.take_snapshot().filter_traces(_SERVER_CODE).compare_to(after_first, "filename"))
    finally:
        tracemalloc.stop()
    assert grown < 1 * MiB, f"{grown / MiB:.1f} MiB kept after {requests - 1} more requests"
    with service.state.lock:
        assert service.state.views.entries <= 3  # n1, once per pod shape seen


NODES = [f"node-{i:04d}" for i in range(400)]


def _state(policy: PlacementPolicy, *, seed: int = 5) -> SchedulerState:
    """400 2-GPU nodes, loaded at random so that their answers differ."""
    rng = random.Random(seed)
    state = SchedulerState(Cluster(policy=policy), StateSettings(), clock=time.time)
    for name in NODES:
        state.apply_node(node_manifest(name, gpus=2))
    for i in range(len(NODES) * 2):
        request = pod_request_from_k8s(_probe(f"fill{i}", rng.choice([10, 20, 30, 50, 100])))
        if not isinstance(state.reserve_for_bind(request, rng.choice(NODES)), FitFailure):
            state.finish_bind(request.uid, bound=True)
    return state


def _fresh_names(names: list[str]) -> list[str]:
    """The same names as new string objects, as each request's JSON gives them."""
    return [name.encode().decode() for name in names]


@dataclass(frozen=True)
class Traffic:
    name: str
    requests: int
    request: Callable[[int], tuple[PodRequest, list[str]]]


TRAFFIC = [
    # a new pod shape per request over every node: a view each
    Traffic("new-shapes", 300, lambda i: (pod_request_from_k8s(_probe(f"s{i}", 50, 1 + i)), _fresh_names(NODES))),
    # few shapes, each over every node and as many unknown names
    Traffic("unknown-names", 60, lambda i: (pod_request_from_k8s(_probe(f"u{i}", 50, 1 + i % 4)), _fresh_names(NODES) + [f"ghost-{i}-{n}" for n in range(400)])),
]


@pytest.mark.parametrize("traffic", TRAFFIC, ids=[t.name for t in TRAFFIC])
def test_views_stay_within_their_byte_budget(traffic: Traffic) -> None:
    """Without a budget the traffic would hold 100,000+ entries (20+ MiB by the estimate); the
    views hold at most `max_bytes` by the estimate, and the memory tracemalloc sees them give
    back when dropped is within it too."""
    state = _state(PlacementPolicy.SPREAD)
    budget = ViewBudget(max_bytes=1 * MiB)
    gc.collect()
    tracemalloc.start()
    try:
        views = EvaluationViews(budget)
        peak = 0
        for i in range(traffic.requests):
            request, names = traffic.request(i)
            answer = views.evaluations(request, names, state.cluster.policy().epoch, state.cluster.evaluate_many)
            assert set(answer) == set(names)
            assert views.estimated_bytes <= budget.max_bytes
            peak = max(peak, views.estimated_bytes)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        del views, answer, names
        gc.collect()
        freed = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    if traffic.name == "new-shapes":
        assert peak > budget.max_bytes // 2  # the budget, not the traffic, is what stopped it
    assert freed <= budget.max_bytes, f"{freed / MiB:.2f} MiB"


@pytest.mark.parametrize("policy", [PlacementPolicy.FRAGMENTATION_AWARE, PlacementPolicy.BINPACK, PlacementPolicy.SPREAD])
def test_entry_bytes_is_an_upper_bound_of_a_view_entry(policy: PlacementPolicy) -> None:
    """What a view entry costs once the views are the only holder of its evaluation and of its
    name string: 40 shapes over 400 loaded nodes, measured as what dropping the views gives back
    after the evaluation cache let go (a new policy object drops it)."""
    state = _state(policy)
    gc.collect()
    tracemalloc.start()
    try:
        views = EvaluationViews(ViewBudget(max_bytes=1 << 40))
        for i in range(40):
            request = pod_request_from_k8s(_probe(f"e{i}", 30 + i, 1 + i))
            views.evaluations(request, _fresh_names(NODES), state.cluster.policy().epoch, state.cluster.evaluate_many)
        state.cluster.install_policy(Cluster(policy=policy, mix=state.cluster.mix).policy())
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        entries = views.entries
        del views
        gc.collect()
        freed = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert entries == 40 * len(NODES)
    # the estimate: ENTRY_BYTES per entry and the characters of the node's name
    assert freed / entries <= ENTRY_BYTES + len(NODES[0]), freed / entries


def test_notes_on_unknown_fields_stay_small_whatever_the_field_names(harness: Harness) -> None:
    """Bodies carrying 64 KiB field names the extender does not know: each is answered, and what
    it keeps to log each field once is bounded (64 notes of at most 100 characters)."""
    harness.api.create_node(node_manifest("n1", gpus=2))
    service = harness.start()
    client = harness.client(service)
    gc.collect()
    tracemalloc.start()
    try:
        after_first = 0
        for r in range(100):
            body = json.dumps({"Pod": _probe("p"), "NodeNames": ["n1"], f"{r:03d}" + "x" * (64 * KiB): 1}).encode()
            status, data = client.post_raw("/filter", body)
            assert status == 200 and json.loads(data)["NodeNames"] == ["n1"]
            del body, data
            if r == 0:  # collected only before a snapshot (see above)
                gc.collect()
                after_first = tracemalloc.take_snapshot().filter_traces(_SERVER_CODE)
        assert after_first is not None
        gc.collect()
        # what the server's own code holds on to: threads other tests left behind (a watch
        # winding down, a loopback API server closing) allocate elsewhere, at their own pace
        grown = sum(d.size_diff for d in tracemalloc.take_snapshot().filter_traces(_SERVER_CODE).compare_to(after_first, "filename"))
    finally:
        tracemalloc.stop()
    assert grown < 256 * KiB, f"{grown / KiB:.0f} KiB"  # 64 whole names would be 4 MiB
