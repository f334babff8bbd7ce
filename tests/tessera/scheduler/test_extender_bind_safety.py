"""No two pods ever get the same GPU capacity: concurrent binds, retries, restarts, TTL expiry."""
from __future__ import annotations

import queue
import random
import threading
from collections.abc import Iterator

import pytest
from audit import audit
from extender_harness import GIB, Harness, node_manifest, pod_manifest, wait_until

from tessera.alloc import PlacementPolicy
from tessera.model.contract import ANNOTATION_ALLOCATION, ANNOTATION_ASSUME_TIME, Allocation
from tessera.kube.api import KubeApiError, KubeObject
from tessera.kube.fake import FakeKubeApi
from tessera.scheduler.service import ExtenderService
from tessera.scheduler.state import Holding

GPU_MEMORY = 16 * GIB


class FlakyBindApi(FakeKubeApi):
    """An API server whose next `fail_binds` Binding requests fail (the extender 'dies' there)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_binds = 0

    def bind_pod(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        if self.fail_binds > 0:
            self.fail_binds -= 1
            raise KubeApiError(500, "injected: connection reset before the binding was created")
        super().bind_pod(namespace, name, uid, node_name)


class SteppedClock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def flaky() -> Iterator[Harness]:
    h = Harness(FlakyBindApi())
    yield h
    h.close()


@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.FRAGMENTATION_AWARE])
def test_bind_storm_never_overcommits(harness: Harness, policy: PlacementPolicy) -> None:
    harness.policy = policy
    for i in range(3):
        harness.api.create_node(node_manifest(f"n{i}", gpus=2, memory_mib=GPU_MEMORY))
    service = harness.start()
    rng = random.Random(7)
    work: queue.Queue[str] = queue.Queue()
    for i in range(48):
        core = rng.choice([10, 20, 25, 30, 40, 50, 60, 100])
        memory = rng.choice([None, 2 * GIB, 4 * GIB])
        harness.api.create_pod(pod_manifest(f"p{i}", ("main", core, memory)))
        work.put(f"p{i}")
    outcomes: dict[str, str | None] = {}
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        scheduler = harness.scheduler(service, seed=seed)
        local = random.Random(seed)
        try:
            while True:
                try:
                    name = work.get_nowait()
                except queue.Empty:
                    return
                node = None
                for _ in range(3):  # kube-scheduler retries a pod whose bind failed
                    node = scheduler.schedule("default", name).node
                    if node:
                        break
                outcomes[name] = node
                if node and local.random() < 0.5:
                    pod = harness.api.get_pod("default", name)
                    assert scheduler.bind(pod, node) == ""  # a retried bind of a bound pod succeeds
                    assert "already bound" in scheduler.bind(pod, "n0" if node != "n0" else "n1")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    placed = {n for n, node in outcomes.items() if node}
    assert len(outcomes) == 48 and len(placed) >= 12
    usage = audit(harness.api, gpu_memory_mib=GPU_MEMORY)
    # the cache agrees with the API server once the watch has caught up
    assert wait_until(lambda: service.state.summary()[3] * 100 == pytest.approx(sum(usage.values())))
    assert service.state.summary()[1] == len(placed)


def test_concurrent_binds_of_one_pod_reserve_once(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1))
    service = harness.start()
    harness.api.create_pod(pod_manifest("p", ("main", 60, None)))
    pod = harness.api.get_pod("default", "p")
    barrier = threading.Barrier(6)
    results: list[str] = []

    def bind() -> None:
        scheduler = harness.scheduler(service)
        barrier.wait()
        results.append(scheduler.bind(pod, "n1"))

    threads = [threading.Thread(target=bind) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [""] * 6
    assert harness.api.bind_calls == 1
    assert service.state.summary()[3] == pytest.approx(0.6)
    harness.api.create_pod(pod_manifest("q", ("main", 50, None)))
    assert harness.scheduler(service).schedule("default", "q").node is None  # 60 % + 50 % > 100 %


def test_restart_between_annotate_and_bind(flaky: Harness) -> None:
    api = flaky.api
    assert isinstance(api, FlakyBindApi)
    api.create_node(node_manifest("n1", gpus=2))
    api.create_node(node_manifest("n2", gpus=2))
    first = flaky.start()
    api.create_pod(pod_manifest("victim", ("main", 70, None)))
    api.fail_binds = 1
    attempt = flaky.scheduler(first).schedule("default", "victim")
    assert attempt.node is None and "injected" in attempt.error
    record = Allocation.from_json(api.get_pod("default", "victim")["metadata"]["annotations"][ANNOTATION_ALLOCATION])
    first.stop(join_s=2)

    second = flaky.start()  # a new process: the state comes from the API server only
    uid = api.get_pod("default", "victim")["metadata"]["uid"]
    assert second.state.holding(uid) is Holding.ASSUMED
    # the recorded share is still taken: 3 pods of 100 % fit only on the other 3 GPUs
    scheduler = flaky.scheduler(second)
    for i in range(4):
        api.create_pod(pod_manifest(f"whole{i}", ("main", 100, None)))
    placed = [scheduler.schedule("default", f"whole{i}").node for i in range(4)]
    assert placed.count(None) == 1
    # kube-scheduler retries the victim: it goes back to its record, same GPU, same assume time
    assert scheduler.schedule("default", "victim").node == record.node
    after = api.get_pod("default", "victim")
    assert Allocation.from_json(after["metadata"]["annotations"][ANNOTATION_ALLOCATION]) == record
    assert after["spec"]["nodeName"] == record.node
    assert second.state.holding(uid) is Holding.BOUND
    audit(api, gpu_memory_mib=GPU_MEMORY)


def test_retry_on_another_node_moves_the_reservation(flaky: Harness) -> None:
    api = flaky.api
    assert isinstance(api, FlakyBindApi)
    api.create_node(node_manifest("n1", gpus=1))
    api.create_node(node_manifest("n2", gpus=1))
    service = flaky.start()
    scheduler = flaky.scheduler(service)
    api.create_pod(pod_manifest("mover", ("main", 100, None)))
    api.fail_binds = 1
    assert "injected" in scheduler.schedule("default", "mover").error
    first = Allocation.from_json(api.get_pod("default", "mover")["metadata"]["annotations"][ANNOTATION_ALLOCATION]).node
    other = "n2" if first == "n1" else "n1"
    assert scheduler.bind(api.get_pod("default", "mover"), other) == ""
    moved = api.get_pod("default", "mover")
    assert Allocation.from_json(moved["metadata"]["annotations"][ANNOTATION_ALLOCATION]).node == other == moved["spec"]["nodeName"]
    api.create_pod(pod_manifest("next", ("main", 100, None)))
    assert scheduler.schedule("default", "next").node == first  # the first node's GPU was given back
    audit(api, gpu_memory_mib=GPU_MEMORY)


def _annotated_but_unbound(flaky: Harness) -> tuple[FlakyBindApi, SteppedClock, ExtenderService, KubeObject]:
    """A 1-GPU node whose only GPU went to pod "lost": annotated at bind, then the Binding failed."""
    api = flaky.api
    assert isinstance(api, FlakyBindApi)
    clock = SteppedClock(1_800_000_000.0)
    flaky.clock = clock
    flaky.ttl_s = 60
    api.create_node(node_manifest("n1", gpus=1))
    service = flaky.start()
    api.create_pod(pod_manifest("lost", ("main", 100, None)))
    api.fail_binds = 1
    assert flaky.scheduler(service).schedule("default", "lost").node is None
    return api, clock, service, api.get_pod("default", "lost")


def test_assumed_reservation_expires_after_ttl(flaky: Harness) -> None:
    api, clock, service, annotated = _annotated_but_unbound(flaky)
    uid = annotated["metadata"]["uid"]
    assert service.state.holding(uid) is Holding.ASSUMED
    clock.now += 30
    assert service.sync.sweep() == 0
    clock.now += 60
    assert service.sync.sweep() == 1
    annotations = api.get_pod("default", "lost")["metadata"]["annotations"]
    assert ANNOTATION_ALLOCATION not in annotations and ANNOTATION_ASSUME_TIME not in annotations
    api.create_pod(pod_manifest("next", ("main", 100, None)))
    assert flaky.scheduler(service).schedule("default", "next").node == "n1"
    assert 'tessera_extender_expired_reservations_total 1.0' in flaky.client(service).get("/metrics")[1]


def test_bound_pod_deleted_while_extender_down_is_released_on_restart(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1))
    first = harness.start()
    harness.api.create_pod(pod_manifest("gone", ("main", 100, None)))
    assert harness.scheduler(first).schedule("default", "gone").node == "n1"
    first.stop(join_s=2)
    harness.api.delete_pod("default", "gone")
    second = harness.start()
    assert second.state.summary()[1] == 0
    harness.api.create_pod(pod_manifest("new", ("main", 100, None)))
    assert harness.scheduler(second).schedule("default", "new").node == "n1"


def test_a_late_watch_event_does_not_bring_back_an_expired_reservation(flaky: Harness) -> None:
    # The watch may deliver the pod as it was right after annotation only after the TTL sweep
    # stripped it; that stale copy must not re-reserve the GPU the sweep just freed.
    api, clock, service, annotated = _annotated_but_unbound(flaky)
    uid = annotated["metadata"]["uid"]
    clock.now += 120
    service.sync.sweep()
    service.state.apply_pod(annotated)  # the late event
    assert service.state.holding(uid) is None
    api.create_pod(pod_manifest("next", ("main", 100, None)))
    assert flaky.scheduler(service).schedule("default", "next").node == "n1"
