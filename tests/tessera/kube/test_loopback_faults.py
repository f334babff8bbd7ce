"""Each fault of the loopback API server, seen through the real client: the exception type and
status the caller gets, whether `may_have_applied` says the write may have landed, and whether it
did land in the store (late writes included). Pauses hold a request where the test wants it, and
a client SIGKILLed there leaves the server serving the next one."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from json_api_stand_in import Loopback, loopback_api

from tessera.kube.api import Conflict, KubeApi, KubeApiError, TransportError, may_have_applied
from tessera.kube.fake import FakeKubeApi
from tessera.kube.loopback_faults import (
    Chance,
    CommitThenFail,
    Delay,
    DropAfter,
    DropBefore,
    EndWatch,
    ExpireWatch,
    Fault,
    FaultKind,
    Match,
    Nth,
    Pause,
    PausePoint,
    Refuse,
)

NS = "default"
LEASE_TIME = "2026-11-28T10:00:00.000000Z"


@dataclass(frozen=True)
class Write:
    """One write of a bind (or a lease renewal), the requests it makes, and how to see it landed."""

    match: Match
    send: Callable[[KubeApi, FakeKubeApi], Any]
    landed: Callable[[FakeKubeApi], bool]


def _lease(fake: FakeKubeApi) -> dict[str, Any]:
    current = fake.get_lease(NS, "tessera-extender")
    return {**current, "spec": {**current["spec"], "holderIdentity": "replica-b"}}


WRITES: dict[str, Write] = {
    "create configmap": Write(
        Match(verb="create", resource="configmaps"),
        lambda api, fake: api.create_configmap(NS, {"metadata": {"name": "record"}, "data": {"gpus": "0"}}),
        lambda fake: [c["metadata"]["name"] for c in fake.list_configmaps()] == ["record"],
    ),
    "patch pod": Write(
        Match(verb="patch", resource="pods", subresource=""),
        lambda api, fake: api.patch_pod_annotations(NS, "p", {"gpu": "0"}, resource_version=fake.get_pod(NS, "p")["metadata"]["resourceVersion"]),
        lambda fake: (fake.get_pod(NS, "p")["metadata"].get("annotations") or {}).get("gpu") == "0",
    ),
    "bind pod": Write(
        Match(verb="create", resource="pods", subresource="binding"),
        lambda api, fake: api.bind_pod(NS, "p", fake.get_pod(NS, "p")["metadata"]["uid"], "n1"),
        lambda fake: fake.get_pod(NS, "p")["spec"].get("nodeName") == "n1",
    ),
    "replace lease": Write(
        Match(verb="update", resource="leases", name="tessera-extender"),
        lambda api, fake: api.replace_lease(NS, "tessera-extender", _lease(fake)),
        lambda fake: fake.get_lease(NS, "tessera-extender")["spec"]["holderIdentity"] == "replica-b",
    ),
}

# fault -> (exception type, status, may_have_applied, the write landed)
OUTCOMES: list[tuple[Fault, type[KubeApiError], int, bool, bool]] = [
    (Refuse(409), Conflict, 409, False, False),
    (Refuse(429), KubeApiError, 429, False, False),
    (Refuse(500), KubeApiError, 500, True, False),
    (Refuse(503), KubeApiError, 503, True, False),
    (Refuse(504), KubeApiError, 504, True, False),
    (CommitThenFail(409), Conflict, 409, False, True),  # what a retry of a landed write reads: re-read to settle it
    (CommitThenFail(500), KubeApiError, 500, True, True),
    (CommitThenFail(504), KubeApiError, 504, True, True),
    (DropBefore(), TransportError, 0, True, False),
    (DropAfter(), TransportError, 0, True, True),
]


def _store() -> FakeKubeApi:
    fake = FakeKubeApi()
    fake.create_node({"metadata": {"name": "n1"}})
    fake.create_pod({"metadata": {"name": "p", "namespace": NS}, "spec": {"containers": [{"name": "c"}]}})
    fake.create_lease(NS, {"metadata": {"name": "tessera-extender"}, "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 4, "renewTime": LEASE_TIME}})
    return fake


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loopback]:
    with loopback_api(tmp_path, _store()) as served:
        yield served
        assert served.server.internal_errors() == []


def _name(fault: Fault) -> str:
    return f"{fault.kind.value}{getattr(fault, 'status', '')}"


@pytest.mark.parametrize(("fault", "error", "status", "ambiguous", "lands"), OUTCOMES, ids=[_name(o[0]) for o in OUTCOMES])
@pytest.mark.parametrize("write", list(WRITES))
def test_each_fault_on_each_write_gives_the_caller_the_right_error_and_the_store_the_right_state(
    loop: Loopback, write: str, fault: Fault, error: type[KubeApiError], status: int, ambiguous: bool, lands: bool
) -> None:
    step = WRITES[write]
    rule = loop.server.faults.add(fault, step.match, Nth(1))
    with pytest.raises(KubeApiError) as info:
        step.send(loop.client(), loop.fake)
    assert type(info.value) is error and info.value.status == status
    assert may_have_applied(info.value) is ambiguous
    assert step.landed(loop.fake) is lands
    assert rule.fired == 1


@pytest.mark.parametrize("fault", [Refuse(500), DropBefore(), DropAfter()], ids=_name)
def test_faults_on_reads_reach_the_caller_too(loop: Loopback, fault: Fault) -> None:
    loop.server.faults.add(fault, Match(verb="get", resource="pods"), Nth(1))
    api = loop.client()
    with pytest.raises(KubeApiError) as info:
        api.get_pod(NS, "p")
    assert info.value.status == (0 if isinstance(fault, (DropBefore, DropAfter)) else 500)
    assert api.get_pod(NS, "p")["metadata"]["name"] == "p"  # Nth(1): the next read is served


@pytest.mark.parametrize("write", ["patch pod", "bind pod"])
def test_a_delayed_write_lands_after_the_client_gave_up(loop: Loopback, write: str) -> None:
    step = WRITES[write]
    loop.server.faults.add(Delay(2.0), step.match, Nth(1))
    with pytest.raises(TransportError) as info:
        step.send(loop.client(request_timeout_s=0.3), loop.fake)
    gave_up_at = time.monotonic()
    assert may_have_applied(info.value)
    landed = loop.server.faults.wait_for(lambda r: r.fault is FaultKind.DELAY and r.stage == "applied", timeout_s=10)
    assert landed is not None and landed.at > gave_up_at
    assert step.landed(loop.fake)


@pytest.mark.parametrize("at", ["received", "applied"])
def test_a_paused_request_waits_for_release_and_then_completes(loop: Loopback, at: PausePoint) -> None:
    step = WRITES["patch pod"]
    pause = Pause(at)
    loop.server.faults.add(pause, step.match, Nth(1))
    outcome: list[object] = []
    client = threading.Thread(target=lambda: outcome.append(step.send(loop.client(), loop.fake)))
    client.start()
    assert pause.wait_blocked(timeout_s=10)
    assert step.landed(loop.fake) is (at == "applied") and outcome == []
    pause.release()
    client.join(10)
    assert len(outcome) == 1 and step.landed(loop.fake)


_CLIENT = """
import sys
from tessera.kube.client import ClientSettings, KubernetesClientApi
api = KubernetesClientApi.connect(ClientSettings(kubeconfig=sys.argv[1]))
if sys.argv[2] == "watch":
    for _ in api.watch_pods(stop_after_s=60):
        pass
api.patch_pod_annotations("default", "p", {"written-by": "killed client"})
"""


@pytest.mark.parametrize("at", ["received", "applied"])
def test_a_client_killed_while_its_request_is_held_leaves_the_server_serving(loop: Loopback, at: PausePoint) -> None:
    pause = Pause(at)
    loop.server.faults.add(pause, Match(verb="patch", resource="pods"), Nth(1))
    process = subprocess.Popen([sys.executable, "-c", _CLIENT, str(loop.kubeconfig), "patch"])
    try:
        assert pause.wait_blocked(timeout_s=60)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(30)
    pause.release()
    assert loop.server.faults.wait_for(lambda r: r.stage in ("answered", "client-gone"), timeout_s=10) is not None
    annotations = loop.fake.get_pod(NS, "p")["metadata"].get("annotations") or {}
    assert annotations.get("written-by") == "killed client"  # in flight when its client died: it still lands
    api = loop.client()
    api.patch_pod_annotations(NS, "p", {"written-by": "next client"})
    assert api.get_pod(NS, "p")["metadata"]["annotations"]["written-by"] == "next client"


def test_a_client_killed_during_a_watch_leaves_the_server_serving(loop: Loopback) -> None:
    pause = Pause("applied")  # a watch is "applied" once its stream has started
    loop.server.faults.add(pause, Match(verb="watch", resource="pods"), Nth(1))
    process = subprocess.Popen([sys.executable, "-c", _CLIENT, str(loop.kubeconfig), "watch"])
    try:
        assert pause.wait_blocked(timeout_s=60)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(30)
    pause.release()
    loop.fake.create_pod({"metadata": {"name": "q", "namespace": NS}, "spec": {}})
    events = list(loop.client().watch_pods(stop_after_s=1))
    assert sorted(e.object["metadata"]["name"] for e in events) == ["p", "q"]


def _failures(loop: Loopback, rule_when: Chance | Nth, reads: int) -> list[int]:
    loop.server.faults.add(Refuse(503), Match(verb="get", resource="pods", name="p"), rule_when)
    api = loop.client()
    failed = []
    for i in range(reads):
        try:
            api.get_pod(NS, "p")
        except KubeApiError:
            failed.append(i)
    return failed


def test_a_seeded_chance_replays_the_same_schedule_and_nth_fires_once(tmp_path: Path) -> None:
    schedules = []
    for run in range(2):
        (tmp_path / str(run)).mkdir()
        with loopback_api(tmp_path / str(run), _store()) as loop:
            schedules.append(_failures(loop, Chance(0.5, seed=11), 24))
    assert schedules[0] == schedules[1] and 0 < len(schedules[0]) < 24
    (tmp_path / "nth").mkdir()
    with loopback_api(tmp_path / "nth", _store()) as loop:
        assert _failures(loop, Nth(3), 6) == [2]
        records = [(r.fault, r.stage) for r in loop.server.faults.records()]
    assert records == [(FaultKind.REFUSE, "fired"), (FaultKind.REFUSE, "answered")]


@pytest.mark.parametrize("fault", [EndWatch(after_events=1), ExpireWatch(after_events=1)], ids=_name)
def test_a_watch_ends_after_the_events_the_fault_allows(loop: Loopback, fault: Fault) -> None:
    loop.server.faults.add(fault, Match(verb="watch"), Nth(1))
    loop.fake.create_pod({"metadata": {"name": "q", "namespace": NS}, "spec": {}})
    stream = loop.client().watch_pods(stop_after_s=30)
    assert next(stream).type == "ADDED"
    if isinstance(fault, EndWatch):
        assert list(stream) == []
    else:
        with pytest.raises(KubeApiError) as info:
            next(stream)
        assert info.value.status == 410 and info.value.message.startswith("too old resource version: ")
