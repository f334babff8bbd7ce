"""Watch faults as the extender's cache sees them, through the real client and the loopback API
server: a watch the server ends cleanly is resumed from the last version seen (nothing relisted,
nothing lost); a watch ended with 410 Expired, or one whose connection breaks, is followed by a
fresh list, after which the cache is whole again."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from json_api_stand_in import Loopback, loopback_api

from tessera.kube.loopback_faults import DropAfter, EndWatch, ExpireWatch, Fault, FaultKind, Match, Nth
from tessera.model.contract import ANNOTATION_NODE_GPUS, LABEL_POOL_KIND, NodeGpu
from tessera.scheduler.http_server import ServerSettings
from tessera.scheduler.service import ExtenderConfig, ExtenderService
from tessera.scheduler.sync import SyncSettings


def shared_node(name: str) -> dict[str, object]:
    inventory = [NodeGpu(0, f"GPU-{name}", "T4", 16 * 1024).to_json()]
    return {"metadata": {"name": name, "labels": {LABEL_POOL_KIND: "shared"}, "annotations": {ANNOTATION_NODE_GPUS: json.dumps(inventory)}},
            "status": {"allocatable": {"cpu": "8", "tessera.dev/gpu-core": "100", "tessera.dev/gpu-memory": "16384"}}}


def wait_until(condition: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loopback]:
    with loopback_api(tmp_path) as served:
        served.fake.create_node(shared_node("n1"))
        yield served
        assert served.server.internal_errors() == []


def _extender(loop: Loopback) -> ExtenderService:
    config = ExtenderConfig(
        server=ServerSettings(host="127.0.0.1", port=0),
        sync=SyncSettings(watch_timeout_s=30.0, retry_backoff_s=0.1, janitor_interval_s=3600.0),
    )
    service = ExtenderService(loop.client(), config)
    assert service.start(wait_ready_s=30), "the extender's cache did not sync through the loopback API server"
    return service


@pytest.mark.parametrize(
    ("fault", "relists"),
    [(EndWatch(), False), (ExpireWatch(), True), (DropAfter(), True)],
    ids=["ended cleanly", "ended with 410", "connection broken"],
)
def test_the_cache_resumes_or_relists_as_the_watch_ended(loop: Loopback, fault: Fault, relists: bool) -> None:
    loop.server.faults.add(fault, Match(verb="watch", resource="nodes"), Nth(1))
    service = _extender(loop)
    try:
        assert loop.server.faults.wait_for(lambda r: r.stage in ("watch-ended", "watch-expired", "dropped"), timeout_s=15) is not None
        loop.fake.create_node(shared_node("n2"))  # after the fault: only a working watch brings it
        assert wait_until(lambda: set(service.state.cluster.nodes) == {"n1", "n2"})
        node_requests = [(r.verb, r.path) for r in loop.server.requests() if r.resource == "nodes"]
        verbs = [verb for verb, _ in node_requests]
        assert verbs[:2] == ["list", "watch"]
        assert verbs[2] == ("list" if relists else "watch")
        if not relists:  # the ended watch brought nothing: the next one starts where the list left off
            assert "resourceVersion=" in node_requests[1][1] and node_requests[2][1] == node_requests[1][1]
        fired = [r for r in loop.server.faults.records() if r.stage == "fired"]
        assert [r.fault for r in fired] == [fault.kind] and fault.kind in (FaultKind.END_WATCH, FaultKind.EXPIRE_WATCH, FaultKind.DROP_AFTER)
    finally:
        service.stop()
