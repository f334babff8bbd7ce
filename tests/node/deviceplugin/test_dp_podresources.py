"""The PodResources client over a real unix socket, against kubelet's PodResources server as each
release serves it (the emulator's `PodResourcesServer`: codes and messages from kubelet's source)."""
from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from tessera.model.contract import GPU_CORE
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2 as pr
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2_grpc as pr_grpc
from tessera_node.deviceplugin.podresources import GetAnswer, ListAnswer, PodResourcesClient, PodResourcesError, TokenHolder, classify_get_error
from tessera_node.testing.kubelet_podresources import PodKey, PodResourcesServer
from tessera_node.testing.kubelet_versions import (
    GET_DISABLED,
    GET_UNIMPLEMENTED,
    KUBELET_1_26,
    KUBELET_1_30,
    KUBELET_1_34,
    RATE_LIMITED,
    KubeletVersion,
    pod_not_found,
)


def _pod(name: str, tokens: list[str], namespace: str = "ns") -> pr.PodResources:
    return pr.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pr.ContainerResources(name="main", devices=[pr.ContainerDevices(resource_name=GPU_CORE, device_ids=tokens), pr.ContainerDevices(resource_name="example.com/nic", device_ids=["nic0"])]),
            pr.ContainerResources(name="no-gpu"),
        ],
    )


def _tokens(gpu: int, first: int, n: int = 2) -> list[str]:
    return [f"gpu{gpu}-core{first + i:03d}" for i in range(n)]


class Kubelet:
    """kubelet's PodResources server of one release, holding the pods a test sets; `List` can be
    held open to make callers overlap."""

    def __init__(self, version: KubeletVersion) -> None:
        self.pods: list[pr.PodResources] = []
        self.hold_list = threading.Event()
        self.hold_list.set()
        self.list_entered = threading.Event()
        self.server = self._make_server(version)

    def _make_server(self, version: KubeletVersion) -> PodResourcesServer:
        return PodResourcesServer(version, self._snapshot, lambda: [])

    def _snapshot(self) -> tuple[pr.ListPodResourcesResponse, dict[PodKey, pr.PodResources]]:
        pods = list(self.pods)  # what kubelet holds when the call arrives
        if not self.hold_list.is_set():
            self.list_entered.set()
            self.hold_list.wait(5)
        return pr.ListPodResourcesResponse(pod_resources=pods), {(p.namespace, p.name): p for p in pods}

    @property
    def calls(self) -> dict[str, int]:
        return self.server.calls


@pytest.fixture
def serve() -> Iterator[object]:
    roots: list[tuple[grpc.Server, Path]] = []

    def start(kubelet: Kubelet) -> Path:
        root = Path(tempfile.mkdtemp(prefix="pr", dir="/tmp"))
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pr_grpc.add_PodResourcesListerServicer_to_server(kubelet.server, server)
        server.add_insecure_port(f"unix://{root / 'kubelet.sock'}")
        server.start()
        roots.append((server, root))
        return root / "kubelet.sock"

    yield start
    for server, root in roots:
        server.stop(0)
        shutil.rmtree(root, ignore_errors=True)


RELEASES = [KUBELET_1_26, KUBELET_1_30, KUBELET_1_34]
RELEASE_IDS = ["1.26 no Get", "1.30 gate off", "1.34 gate on"]


@pytest.mark.parametrize(
    ("code", "details", "answer"),
    [
        (grpc.StatusCode.UNKNOWN, GET_DISABLED, GetAnswer.UNAVAILABLE),
        (grpc.StatusCode.UNIMPLEMENTED, GET_UNIMPLEMENTED, GetAnswer.UNAVAILABLE),
        (grpc.StatusCode.UNKNOWN, pod_not_found("ns", "a"), GetAnswer.POD_NOT_FOUND),
        (grpc.StatusCode.NOT_FOUND, "pod a not found", GetAnswer.POD_NOT_FOUND),
        (grpc.StatusCode.UNKNOWN, pod_not_found("ns", "other"), GetAnswer.UNAVAILABLE),  # not about our pod: not a miss
        (grpc.StatusCode.UNKNOWN, "something new", GetAnswer.UNAVAILABLE),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED, GetAnswer.RATE_LIMITED),
        (grpc.StatusCode.UNAVAILABLE, "connection refused", GetAnswer.UNREACHABLE),
    ],
    ids=["gate off", "before 1.27", "pod not known", "NOT_FOUND", "another pod's message", "unknown answer", "rate limit", "kubelet down"],
)
def test_get_errors_are_read_from_kubelets_own_codes_and_messages(code: grpc.StatusCode, details: str, answer: GetAnswer) -> None:
    assert classify_get_error(code, details, "ns", "a") is answer


@pytest.mark.parametrize("version", RELEASES, ids=RELEASE_IDS)
def test_a_burst_of_starts_is_answered_by_one_list_on_every_release(serve, version: KubeletVersion) -> None:  # type: ignore[no-untyped-def]
    """kubelet admits a burst (Allocate each), then starts the containers: tokens allocated
    before the one List began need no further call, with or without Get."""
    kubelet = Kubelet(version)
    client = PodResourcesClient(serve(kubelet))
    kubelet.pods = [_pod(f"p{i}", _tokens(i % 8, 10 * (i // 8))) for i in range(20)]
    for i in range(20):
        client.note_allocate(_tokens(i % 8, 10 * (i // 8)))
    for i in reversed(range(20)):
        assert [h.pod for h in client.holders_of(_tokens(i % 8, 10 * (i // 8)))] == [f"p{i}"]
    assert kubelet.calls == {"List": 1, "Get": 0, "GetAllocatableResources": 0}
    assert client.answered_from_last_list == 19
    client.close()


@pytest.mark.parametrize("version", RELEASES, ids=RELEASE_IDS)
def test_tokens_given_to_a_new_pod_are_never_attributed_to_the_old_one(serve, version: KubeletVersion, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """The old holder is gone and kubelet gave its tokens to a new pod (through Allocate). With
    Get, kubelet says it does not know the old pod: a miss, Get stays in use. Without Get (gate
    off, or a release before it), the client lists from then on and says so once."""
    caplog.set_level(logging.INFO, logger="tessera.deviceplugin")
    kubelet = Kubelet(version)
    client = PodResourcesClient(serve(kubelet))
    tokens = _tokens(0, 0)
    kubelet.pods = [_pod("a", tokens)]
    client.note_allocate(tokens)
    assert [h.pod for h in client.holders_of(tokens)] == ["a"]
    for new in ("b", "c", "d"):
        kubelet.pods = [_pod(new, tokens)]  # the previous pod deleted, its tokens reused
        client.note_allocate(tokens)
        assert [h.pod for h in client.holders_of(tokens)] == [new]
    assert kubelet.calls["List"] == 4
    if version.get_enabled:
        assert client.get_usable and kubelet.calls["Get"] == 3, "a pod kubelet does not know is a miss, not 'no Get'"
        assert not [r for r in caplog.records if "does not serve PodResources Get" in r.message]
    else:
        assert not client.get_usable
        expected = GET_DISABLED if version.has_get else GET_UNIMPLEMENTED
        assert client.get_unavailable_reason is not None and expected in client.get_unavailable_reason
        assert kubelet.calls["Get"] == (1 if version.has_get else 0), "Get tried once, then never again"
        assert len([r for r in caplog.records if "does not serve PodResources Get" in r.message]) == 1, "logged once"
    client.close()


def test_get_confirms_a_holder_kubelet_kept(serve) -> None:  # type: ignore[no-untyped-def]
    """An Allocate named the tokens after the List (e.g. it failed and kubelet recorded nothing):
    on 1.34 one Get of the listed pod settles it, without listing every pod again."""
    kubelet = Kubelet(KUBELET_1_34)
    client = PodResourcesClient(serve(kubelet))
    kubelet.pods = [_pod("a", _tokens(0, 0)), _pod("b", _tokens(0, 2))]
    assert [h.pod for h in client.holders_of(_tokens(0, 0))] == ["a"]
    client.note_allocate(_tokens(0, 2))
    assert [h.pod for h in client.holders_of(_tokens(0, 2))] == ["b"]
    assert (kubelet.calls["List"], kubelet.calls["Get"]) == (1, 1)
    client.close()


def test_an_unknown_answer_to_get_means_list_from_then_on(serve, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    class Odd(Kubelet):
        def _make_server(self, version: KubeletVersion) -> PodResourcesServer:
            server = super()._make_server(version)

            def get(request: pr.GetPodResourcesRequest, context: grpc.ServicerContext) -> pr.GetPodResourcesResponse:
                server.calls["Get"] += 1
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "no Get for you")
                raise AssertionError("unreachable")

            server.Get = get  # type: ignore[method-assign]
            return server

    caplog.set_level(logging.INFO, logger="tessera.deviceplugin")
    kubelet = Odd(KUBELET_1_34)
    client = PodResourcesClient(serve(kubelet))
    kubelet.pods = [_pod("a", _tokens(0, 0))]
    assert [h.pod for h in client.holders_of(_tokens(0, 0))] == ["a"]
    for _ in range(3):
        client.note_allocate(_tokens(0, 0))
        assert [h.pod for h in client.holders_of(_tokens(0, 0))] == ["a"]
    assert kubelet.calls["Get"] == 1 and kubelet.calls["List"] == 4
    assert client.get_unavailable_reason == "PERMISSION_DENIED: no Get for you"
    client.close()


def test_calls_rejected_by_kubelets_rate_limit_are_retried(serve) -> None:  # type: ignore[no-untyped-def]
    """kubelet lets all its PodResources clients together make 100 calls/s (burst 10). Here a
    slower bucket (20/s, burst 2) and a start pattern that needs a List each time."""
    kubelet = Kubelet(KubeletVersion("1.30", has_get=True, get_enabled=False, qps=20, burst=2))
    client = PodResourcesClient(serve(kubelet))
    for i in range(8):
        kubelet.pods = [*kubelet.pods, _pod(f"p{i}", _tokens(0, 2 * i))]
        client.note_allocate(_tokens(0, 2 * i))
        assert [h.pod for h in client.holders_of(_tokens(0, 2 * i))] == [f"p{i}"]
    assert kubelet.server.limiter.rejected > 0 and client.rate_limited > 0, "test setup: the bucket should have run dry"
    assert kubelet.calls["List"] == 8
    client.close()


def test_concurrent_misses_share_one_list_that_began_after_they_arrived(serve) -> None:  # type: ignore[no-untyped-def]
    """Starts that overlap share a List, but never one that began before they arrived (it could
    predate their own assignment)."""
    kubelet = Kubelet(KUBELET_1_30)
    client = PodResourcesClient(serve(kubelet))
    kubelet.pods = [_pod("first", _tokens(0, 0))]
    kubelet.hold_list.clear()
    first = threading.Thread(target=lambda: client.holders_of(_tokens(0, 0)))
    first.start()
    assert kubelet.list_entered.wait(2)
    # Assigned after the first List began: only a later List can name them.
    kubelet.pods = [_pod("first", _tokens(0, 0))] + [_pod(f"late{i}", _tokens(1, 10 * i)) for i in range(3)]
    answers: dict[int, list[TokenHolder]] = {}
    late = [threading.Thread(target=lambda i=i: answers.__setitem__(i, client.holders_of(_tokens(1, 10 * i)))) for i in range(3)]
    for thread in late:
        thread.start()
    time.sleep(0.1)
    kubelet.hold_list.set()
    for thread in [first, *late]:
        thread.join(5)
    assert {i: [h.pod for h in a] for i, a in answers.items()} == {i: [f"late{i}"] for i in range(3)}
    assert kubelet.calls["List"] == 2, "the three late starts should have shared one List"
    client.close()


def test_an_unreachable_kubelet_is_reported_with_what_to_mount() -> None:
    client = PodResourcesClient(Path("/tmp/does-not-exist/kubelet.sock"), timeout_s=0.2)
    with pytest.raises(PodResourcesError, match="pod-resources"):
        client.holders_of(["gpu0-core000"])
    client.close()


@pytest.mark.parametrize(
    ("pods", "extra"),
    [
        ([_pod("gpu0-core000", ["gpu1-core000"], namespace="gpu0-core000"), _pod("real", ["gpu0-core000"])], b""),
        ([_pod("a", ["gpu2-core010", "gpu2-core011"]), _pod("real", ["gpu0-core000"])], b"\x28\x01"),  # an unknown varint field
        ([_pod("x", ["xgpu0-core000"]), _pod("real", ["gpu0-core000"])], b""),
    ],
    ids=["token text in another field", "unexpected field: decoded in full", "longer ID containing the token"],
)
def test_a_list_answer_names_only_real_holders(pods: list[pr.PodResources], extra: bytes) -> None:
    blob = pr.ListPodResourcesResponse(pod_resources=pods).SerializeToString() + extra
    answer = ListAnswer(blob, 1, 0, GPU_CORE)
    assert answer.holders_of(frozenset({"gpu0-core000"})) == [TokenHolder("ns", "real", "main", frozenset({"gpu0-core000"}))]
    assert answer.holders_of(frozenset({"gpu5-core000"})) == []
    assert sorted(h.pod for h in answer.all_holders()) == sorted(p.name for p in pods)


def test_after_an_allocate_a_background_list_lets_the_start_answer_without_calling_kubelet(serve) -> None:  # type: ignore[no-untyped-def]
    kubelet = Kubelet(KUBELET_1_30)
    client = PodResourcesClient(serve(kubelet), prefetch_gap_s=0.02)
    for i in range(5):
        tokens = _tokens(0, 2 * i)
        client.note_allocate(tokens)
        kubelet.pods = [*kubelet.pods, _pod(f"p{i}", tokens)]  # kubelet records it once Allocate returned
        client.after_allocate()
        deadline = time.monotonic() + 2
        while client.prefetches <= i and time.monotonic() < deadline:  # kubelet creates the sandbox meanwhile
            time.sleep(0.005)
        lists = kubelet.calls["List"]
        assert [h.pod for h in client.holders_of(tokens)] == [f"p{i}"]
        assert kubelet.calls["List"] == lists, "the start was answered from the background List"
    client.close()


def test_background_lists_are_spaced_and_never_trusted_over_a_later_allocate(serve) -> None:  # type: ignore[no-untyped-def]
    """A burst of 40 Allocates within ~0.1 s costs a handful of background Lists (20 ms apart),
    not 40; tokens given away again after a List are looked up again."""
    kubelet = Kubelet(KUBELET_1_30)
    client = PodResourcesClient(serve(kubelet), prefetch_gap_s=0.02)
    for i in range(40):
        client.note_allocate(_tokens(i % 8, 10 * (i // 8)))
        kubelet.pods = [*kubelet.pods, _pod(f"p{i}", _tokens(i % 8, 10 * (i // 8)))]
        client.after_allocate()
        time.sleep(0.0025)
    time.sleep(0.2)
    assert 1 <= kubelet.calls["List"] <= 10, kubelet.calls
    kubelet.pods = [p for p in kubelet.pods if p.name != "p0"] + [_pod("q", _tokens(0, 0))]  # p0 left, q got its tokens
    client.note_allocate(_tokens(0, 0))
    assert [h.pod for h in client.holders_of(_tokens(0, 0))] == ["q"]
    client.close()


def test_a_background_list_gives_way_to_kubelets_rate_limit(serve) -> None:  # type: ignore[no-untyped-def]
    """When kubelet's budget is spent (other clients), the background List is not retried; the
    start lists for itself, retrying until kubelet lets it."""
    kubelet = Kubelet(KubeletVersion("1.30", has_get=True, get_enabled=False, qps=1, burst=1))
    client = PodResourcesClient(serve(kubelet), prefetch_gap_s=0.02)
    kubelet.server.limiter.allow()  # another client took the one token
    client.note_allocate(_tokens(0, 0))
    kubelet.pods = [_pod("a", _tokens(0, 0))]
    client.after_allocate()
    time.sleep(0.05)
    assert client.prefetches == 0 and kubelet.server.limiter.rejected >= 1, "test setup: the background List was rejected"
    assert [h.pod for h in client.holders_of(_tokens(0, 0))] == ["a"]
    assert client.rate_limited >= 1, "the start retried past the limit"
    client.close()
