"""The evaluation caches never answer from before a change, over real HTTP.

/filter and /prioritize are served from per-shape views, per-node and per-state caches and node
summaries (`tessera.scheduler.evaluation_views`, `tessera.alloc.evaluation_cache`). Each test
first makes the extender answer for a pod shape (so the caches hold an answer), then changes
the cluster the way kube-scheduler or the API server does (a bind, a pod deletion, a node update)
and asks again for the same shape."""
from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from extender_harness import Harness, node_manifest, pod_manifest, wait_until
from kube_scheduler_emulator import ExtenderClient

from tessera.alloc import PlacementPolicy
from tessera.model.contract import ANNOTATION_NODE_GPUS, LABEL_MAX_SHARES_PER_GPU
from tessera.kube.api import KubeObject

GPU_FULL = "tessera: not enough free GPU compute or GPU memory"


def _probe(name: str, core: int) -> KubeObject:
    """A pod that is only ever filtered: it asks for a shape without taking anything."""
    pod = pod_manifest(name, ("main", core, None))
    pod["metadata"]["uid"] = f"uid-{name}"
    return pod


def _filter(client: ExtenderClient, pod: KubeObject, nodes: list[str]) -> tuple[list[str], dict[str, str]]:
    status, result = client.post("filter", {"Pod": pod, "NodeNames": nodes})
    assert status == 200, result
    return list(result["NodeNames"] or []), dict(result["FailedNodes"] or {})


def _scores(client: ExtenderClient, pod: KubeObject, nodes: list[str]) -> dict[str, int]:
    status, result = client.post("prioritize", {"Pod": pod, "NodeNames": nodes})
    assert status == 200, result
    return {p["Host"]: p["Score"] for p in result}


def _schedule(harness: Harness, scheduler: Any, name: str, core: int) -> str:
    harness.api.create_pod(pod_manifest(name, ("main", core, None)))
    attempt = scheduler.schedule("default", name)
    assert attempt.node is not None, attempt
    return str(attempt.node)


def _set_gpu_health(harness: Harness, node: str, index: int, healthy: bool) -> None:
    gpus = json.loads(harness.api.get_node(node)["metadata"]["annotations"][ANNOTATION_NODE_GPUS])
    gpus[index]["healthy"] = healthy
    harness.api.patch_node_annotations(node, {ANNOTATION_NODE_GPUS: json.dumps(gpus)})


POLICIES = pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.FRAGMENTATION_AWARE], ids=lambda p: p.value)


@POLICIES
def test_bind_that_fills_a_gpu_rejects_the_node_for_the_same_shape(harness: Harness, policy: PlacementPolicy) -> None:
    harness.policy = policy
    nodes = ["n0", "n1"]
    for name in nodes:
        harness.api.create_node(node_manifest(name, gpus=1))  # identical states: one shared evaluation
    service = harness.start()
    client = harness.client(service)
    probe = _probe("probe", 100)
    assert _filter(client, probe, nodes) == (nodes, {})
    assert set(_scores(client, probe, nodes)) == set(nodes)

    taken = _schedule(harness, harness.scheduler(service), "whole", 100)
    other = next(n for n in nodes if n != taken)
    assert _filter(client, probe, nodes) == ([other], {taken: GPU_FULL})
    assert _scores(client, probe, nodes) == {other: 10, taken: 0}


def test_partial_fills_are_seen_by_every_shape(harness: Harness) -> None:
    """Shares that still fit somewhere on the GPU are not ruled out by the node summary; their
    cached evaluations must still follow each bind."""
    harness.api.create_node(node_manifest("n0", gpus=1))
    service = harness.start()
    client = harness.client(service)
    scheduler = harness.scheduler(service)
    small, half = _probe("small", 30), _probe("half", 50)
    assert _filter(client, small, ["n0"])[0] == ["n0"]
    assert _filter(client, half, ["n0"])[0] == ["n0"]

    _schedule(harness, scheduler, "sixty", 60)  # 40 % left
    assert _filter(client, small, ["n0"])[0] == ["n0"]
    assert _filter(client, half, ["n0"]) == ([], {"n0": GPU_FULL})

    _schedule(harness, scheduler, "thirty", 30)  # 10 % left
    assert _filter(client, small, ["n0"]) == ([], {"n0": GPU_FULL})


def test_scores_follow_binds_that_leave_the_node_feasible(harness: Harness) -> None:
    """Binpack: after a share lands on one of two identical nodes, that node is the fuller one
    and must score best for the same shape (a stale per-node result would keep the tie)."""
    nodes = ["n0", "n1"]
    for name in nodes:
        harness.api.create_node(node_manifest(name, gpus=1))
    service = harness.start()
    client = harness.client(service)
    probe = _probe("probe", 20)
    assert _scores(client, probe, nodes) == {"n0": 10, "n1": 10}
    taken = _schedule(harness, harness.scheduler(service), "thirty", 30)
    other = next(n for n in nodes if n != taken)
    assert _filter(client, probe, nodes) == (nodes, {})
    assert _scores(client, probe, nodes) == {taken: 10, other: 9}


def test_deleted_pod_frees_the_node_for_the_same_shape(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n0", gpus=1))
    service = harness.start()
    client = harness.client(service)
    probe = _probe("probe", 100)
    _schedule(harness, harness.scheduler(service), "whole", 100)
    assert _filter(client, probe, ["n0"]) == ([], {"n0": GPU_FULL})

    harness.api.delete_pod("default", "whole")
    assert wait_until(lambda: _filter(client, probe, ["n0"]) == (["n0"], {}))
    assert _scores(client, probe, ["n0"]) == {"n0": 10}


def test_node_updates_change_the_answer_for_the_same_shape(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n0", gpus=2))
    service = harness.start()
    client = harness.client(service)
    pair = _probe("pair", 200)
    assert _filter(client, pair, ["n0"]) == (["n0"], {})

    _set_gpu_health(harness, "n0", 1, False)
    assert wait_until(lambda: _filter(client, pair, ["n0"]) == ([], {"n0": GPU_FULL}))
    _set_gpu_health(harness, "n0", 1, True)
    assert wait_until(lambda: _filter(client, pair, ["n0"]) == (["n0"], {}))

    # a share cap applied by a label: the second share on the only GPU left is refused
    _set_gpu_health(harness, "n0", 1, False)
    share = _probe("share", 20)
    _schedule(harness, harness.scheduler(service), "first-share", 20)
    assert _filter(client, share, ["n0"]) == (["n0"], {})
    harness.api.patch_node_labels("n0", {LABEL_MAX_SHARES_PER_GPU: "1"})
    assert wait_until(lambda: _filter(client, share, ["n0"]) == ([], {"n0": GPU_FULL}))


@POLICIES
def test_concurrent_filters_never_see_a_bind_undone(harness: Harness, policy: PlacementPolicy) -> None:
    """While other connections keep filtering the same shape (refreshing the shared views), every
    answer after a bind has completed must count that bind."""
    harness.policy = policy
    nodes = [f"n{i}" for i in range(4)]
    for name in nodes:
        harness.api.create_node(node_manifest(name, gpus=2))
    service = harness.start()
    stop = threading.Event()
    errors: list[str] = []

    def hammer(index: int) -> None:
        client = ExtenderClient("127.0.0.1", service.port)
        try:
            while not stop.is_set():
                status, result = client.post("filter", {"Pod": _probe(f"bg{index}", 100), "NodeNames": nodes})
                if status != 200:
                    errors.append(f"HTTP {status}: {result}")
        finally:
            client.close()

    threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    try:
        client = harness.client(service)
        scheduler = harness.scheduler(service)
        free = {name: 2 for name in nodes}
        probe = _probe("probe", 100)
        for i in range(8):
            free[_schedule(harness, scheduler, f"whole-{i}", 100)] -= 1
            expected = [n for n in nodes if free[n] > 0]
            assert _filter(client, probe, nodes) == (expected, {n: GPU_FULL for n in nodes if free[n] == 0})
        assert not any(free.values())
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert not errors
