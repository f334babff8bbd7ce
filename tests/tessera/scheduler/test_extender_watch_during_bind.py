"""Watch events that arrive while a bind owns the pod are applied once the bind lets go.

The bind writes the allocation record, then creates the Binding. When the watch delivers the
record's version before the bind is done, the extender used to drop that event and then wait for
a version it had already seen: every later change to the pod (its start, its priority, another
writer removing the record) went unseen until a relist. `SlowBindApi` makes that order certain:
its Binding waits until the extender's watch has handed over the pod's current version."""
from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import pytest
from extender_harness import Harness, node_manifest, pod_manifest, wait_until

from tessera.kube.api import WatchEvent
from tessera.kube.fake import FakeKubeApi
from tessera.model.contract import ANNOTATION_ALLOCATION
from tessera.scheduler.service import ExtenderService


class SlowBindApi(FakeKubeApi):
    """A Binding that is answered only after the pod watch has passed the pod's version then."""

    def __init__(self) -> None:
        super().__init__()
        self._passed: set[str] = set()
        self._seen = threading.Condition()

    def watch_pods(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        for event in super().watch_pods(resource_version=resource_version, stop_after_s=stop_after_s):
            yield event
            # the consumer asks for the next event only after it applied this one
            with self._seen:
                self._passed.add(str(event.object["metadata"].get("resourceVersion")))
                self._seen.notify_all()

    def bind_pod(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        version = str(self.get_pod(namespace, name)["metadata"]["resourceVersion"])
        with self._seen:
            assert self._seen.wait_for(lambda: version in self._passed, timeout=10), "the watch never delivered the record"
        super().bind_pod(namespace, name, uid, node_name)


@pytest.fixture
def slow() -> Iterator[Harness]:
    h = Harness(SlowBindApi())
    yield h
    h.close()


def _bound(slow: Harness, name: str, core: int) -> tuple[ExtenderService, str]:
    """`name` asks `core` % of a GPU and is bound to n1 (one GPU) by kube-scheduler."""
    slow.api.create_node(node_manifest("n1", gpus=1))
    service = slow.start()
    scheduler = slow.scheduler(service)
    uid = str(slow.api.create_pod(pod_manifest(name, ("main", core, None)))["metadata"]["uid"])
    assert scheduler.schedule("default", name).node == "n1"
    return service, uid


def test_a_pod_that_starts_after_its_bind_is_seen_started(slow: Harness) -> None:
    """Preemption picks the most recently started victim first: an unseen start makes a running
    pod look not yet started."""
    service, uid = _bound(slow, "web", 40)
    slow.api.set_pod_start_time("default", "web", "2024-01-01T00:00:05Z")

    def started() -> bool:
        with service.state.lock:
            return any(h.uid == uid and h.started_at < math.inf for h in service.state.held_on("n1"))

    assert wait_until(started), "the extender never saw the pod start"


def test_a_record_removed_by_another_writer_after_the_bind_gives_its_capacity_back(slow: Harness) -> None:
    service, _ = _bound(slow, "web", 70)
    slow.api.patch_pod_annotations("default", "web", {ANNOTATION_ALLOCATION: None})
    used = lambda: service.state.cluster.nodes["n1"].gpus[0].used_milli  # noqa: E731
    assert wait_until(lambda: used() == 0), f"70 % still counted: {used()} milli"
