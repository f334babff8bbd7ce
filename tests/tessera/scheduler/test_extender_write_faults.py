"""Each API fault at each step of a bind, then kube-scheduler's retries, then a restart: no GPU is
ever over-committed among the records, and the extender counts exactly what the records hold.

The extender talks to the loopback API server through the real client (`KubernetesClientApi`
over HTTP), so a fault is what the client really sees: a 5xx Status, a 409, a connection closed
before or after the write was applied, a write applied after the client timed out. The same
steps with the extender process SIGKILLed in between are in `test_extender_crash_faults.py`."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from audit import audit
from extender_harness import GIB, Harness, node_manifest, pod_manifest, wait_until
from json_api_stand_in import Loopback, loopback_api

from tessera.kube.fake import FakeKubeApi
from tessera.kube.loopback_faults import CommitThenFail, Delay, DropAfter, DropBefore, Fault, FaultKind, Match, Nth, Refuse
from tessera.model.contract import ANNOTATION_ALLOCATION, Allocation
from tessera.model.metrics.extender import ALLOCATED_GPU
from tessera.scheduler.service import ExtenderService

GPU_MEMORY = 16 * GIB
CLIENT_TIMEOUT_S: Final = 1.0  # the extender's per-request timeout here; a Delay past it is a late write
# The API calls of one bind, as the loopback server sees them.
STEPS: Final = {
    "read the pod": Match(verb="get", resource="pods", subresource=""),
    "write the ConfigMap": Match(verb="create", resource="configmaps"),
    "record the allocation": Match(verb="patch", resource="pods", subresource=""),
    "create the Binding": Match(verb="create", resource="pods", subresource="binding"),
}
FAULTS: Final[dict[str, Fault]] = {
    "500 before applying": Refuse(500),
    "409 before applying": Refuse(409),
    "504 after applying": CommitThenFail(504),
    "409 after applying": CommitThenFail(409),
    "dropped before applying": DropBefore(),
    "dropped after applying": DropAfter(),
    "applied after the client gave up": Delay(CLIENT_TIMEOUT_S + 0.5),
}


@pytest.fixture
def loopback(tmp_path: Path) -> Iterator[Loopback]:
    with loopback_api(tmp_path) as lb:
        yield lb


@pytest.fixture
def over_http(loopback: Loopback) -> Iterator[Harness]:
    """Extenders that reach the store only through the loopback server; kube-scheduler's emulator
    and the assertions read the store directly."""
    h = Harness(loopback.fake, service_api=lambda: loopback.client(request_timeout_s=CLIENT_TIMEOUT_S))
    yield h
    h.close()


def recorded_usage(api: FakeKubeApi) -> dict[tuple[str, int], tuple[int, int]]:
    """(node, GPU index) -> (milli, MiB) over the records of live pods: what the extender must count."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for pod in api.list_pods():
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        text = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ALLOCATION)
        if not text:
            continue
        record = Allocation.from_json(text)
        for shares in record.containers.values():
            for share in shares:
                milli, mib = out.get((record.node, share.index), (0, 0))
                out[(record.node, share.index)] = (milli + share.core * 10, mib + share.memory_mib)
    return out


def agrees(service: ExtenderService, api: FakeKubeApi) -> bool:
    return service.state.counted_usage() == recorded_usage(api)


def settle_faults(loopback: Loopback) -> None:
    """Wait until every delayed request has landed (or failed) in the store."""
    fired = [r for r in loopback.server.faults.records() if r.stage == "fired" and r.fault is FaultKind.DELAY]
    for record in fired:
        loopback.server.faults.wait_for(lambda r, s=record.request.serial: r.request.serial == s and r.stage in ("applied", "not-applied"), 10)


@pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
@pytest.mark.parametrize("step", STEPS, ids=list(STEPS))
def test_a_fault_at_any_bind_step_never_overcommits(over_http: Harness, loopback: Loopback, step: str, fault: str) -> None:
    api = loopback.fake
    api.create_node(node_manifest("n1", gpus=1, memory_mib=GPU_MEMORY))
    service = over_http.start()
    scheduler = over_http.scheduler(service)
    api.create_pod(pod_manifest("first", ("main", 60, 6 * GIB)))
    rule = loopback.server.faults.add(FAULTS[fault], STEPS[step], Nth(1))
    first = scheduler.schedule("default", "first")
    assert rule.fired == 1, f"the bind never reached {step}: {first}"
    # a second pod comes before kube-scheduler retries the first (whose record may be on it)
    api.create_pod(pod_manifest("second", ("main", 60, 6 * GIB)))
    second = scheduler.schedule("default", "second")
    settle_faults(loopback)
    for _ in range(3):
        if any(api.get_pod("default", n)["spec"].get("nodeName") for n in ("first", "second")):
            break
        first = scheduler.schedule("default", "first")
    # exactly one of the two runs: 60 % + 60 % > 100 %
    bound = [n for n in ("first", "second") if api.get_pod("default", n)["spec"].get("nodeName") == "n1"]
    assert len(bound) == 1, (first.error, second.error)
    audit(api, gpu_memory_mib=GPU_MEMORY)
    assert wait_until(lambda: agrees(service, api)), (service.state.counted_usage(), recorded_usage(api))
    # a new process rebuilds the same figures from the records alone
    service.abandon(join_s=2)
    again = over_http.start()
    assert wait_until(lambda: agrees(again, api)), (again.state.counted_usage(), recorded_usage(api))
    api.create_pod(pod_manifest("third", ("main", 50, None)))
    assert over_http.scheduler(again).schedule("default", "third").node is None
    audit(api, gpu_memory_mib=GPU_MEMORY)
    text = over_http.client(again).get("/metrics")[1]
    assert f"{ALLOCATED_GPU.name} 0.6" in text
    assert not loopback.server.internal_errors()


def test_an_unanswered_record_write_keeps_the_gpu_until_a_read_settles_it(over_http: Harness, loopback: Loopback) -> None:
    """The record's PATCH gets no answer and the pod cannot be read back: the share stays reserved
    (`unconfirmed`), nothing else gets it, and the next bind settles it by writing it again."""
    api = loopback.fake
    api.create_node(node_manifest("n1", gpus=1, memory_mib=GPU_MEMORY))
    service = over_http.start()
    scheduler = over_http.scheduler(service)
    api.create_pod(pod_manifest("first", ("main", 60, None)))
    faults = loopback.server.faults
    faults.add(DropBefore(), STEPS["record the allocation"], Nth(1))
    faults.add(DropBefore(), STEPS["read the pod"], Nth(2))  # the read-back after the dropped PATCH
    assert "unconfirmed" in scheduler.schedule("default", "first").error
    api.create_pod(pod_manifest("second", ("main", 60, None)))
    assert scheduler.schedule("default", "second").node is None  # the unconfirmed 60 % is still held
    assert scheduler.schedule("default", "first").node == "n1"
    audit(api, gpu_memory_mib=GPU_MEMORY)
    text = over_http.client(service).get("/metrics")[1]
    assert 'tessera_extender_ambiguous_writes_total{outcome="unresolved",write="record"} 1.0' in text
    assert wait_until(lambda: agrees(service, api))
