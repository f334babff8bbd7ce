"""The PodResources client over a real unix socket, including kubelets without `Get`."""
from __future__ import annotations

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
from tessera_node.deviceplugin.podresources import PodResourcesClient, PodResourcesError, TokenHolder


class ListOnlyKubelet(pr_grpc.PodResourcesListerServicer):
    """A kubelet before 1.34 with the Get gate off: Get answers UNIMPLEMENTED (the base class)."""

    def __init__(self) -> None:
        self.pods: list[pr.PodResources] = []
        self.list_calls = 0

    def List(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:
        self.list_calls += 1
        return pr.ListPodResourcesResponse(pod_resources=self.pods)


def _pod(name: str, tokens: list[str]) -> pr.PodResources:
    return pr.PodResources(
        name=name,
        namespace="ns",
        containers=[
            pr.ContainerResources(name="main", devices=[pr.ContainerDevices(resource_name=GPU_CORE, device_ids=tokens), pr.ContainerDevices(resource_name="example.com/nic", device_ids=["nic0"])]),
            pr.ContainerResources(name="no-gpu"),
        ],
    )


@pytest.fixture
def kubelet() -> Iterator[tuple[ListOnlyKubelet, Path]]:
    root = Path(tempfile.mkdtemp(prefix="pr", dir="/tmp"))
    servicer = ListOnlyKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pr_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{root / 'kubelet.sock'}")
    server.start()
    yield servicer, root / "kubelet.sock"
    server.stop(0)
    shutil.rmtree(root, ignore_errors=True)


def test_without_get_every_lookup_lists_and_still_names_the_current_holder(kubelet: tuple[ListOnlyKubelet, Path]) -> None:
    servicer, socket = kubelet
    client = PodResourcesClient(socket)
    servicer.pods = [_pod("a", ["gpu0-core000", "gpu0-core001"])]
    assert client.holders_of(["gpu0-core000", "gpu0-core001"]) == [TokenHolder("ns", "a", "main", frozenset({"gpu0-core000", "gpu0-core001"}))]
    servicer.pods = [_pod("b", ["gpu0-core000", "gpu0-core001"])]  # a deleted, its tokens reused by b
    assert [h.pod for h in client.holders_of(["gpu0-core000", "gpu0-core001"])] == ["b"]
    assert servicer.list_calls == 2
    client.close()


def test_an_unreachable_kubelet_is_reported_with_what_to_mount() -> None:
    client = PodResourcesClient(Path("/tmp/does-not-exist/kubelet.sock"), timeout_s=0.2)
    with pytest.raises(PodResourcesError, match="pod-resources"):
        client.holders_of(["gpu0-core000"])
    client.close()


class GetKubelet(ListOnlyKubelet):
    """A kubelet with `Get`; `List` can be held open to make callers overlap."""

    def __init__(self) -> None:
        super().__init__()
        self.get_calls = 0
        self.supports_get = True  # False: a kubelet without the KubeletPodResourcesGet gate
        self.hold_list = threading.Event()
        self.hold_list.set()
        self.list_entered = threading.Event()

    def List(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:
        answer = pr.ListPodResourcesResponse(pod_resources=self.pods)  # what kubelet holds when the call arrives
        self.list_entered.set()
        self.hold_list.wait(5)
        self.list_calls += 1
        return answer

    def Get(self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext) -> pr.GetPodResourcesResponse:
        if not self.supports_get:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Get is behind the KubeletPodResourcesGet gate")
        self.get_calls += 1
        for pod in self.pods:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return pr.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, "no such pod")
        raise AssertionError("unreachable")


@pytest.fixture
def get_kubelet() -> Iterator[tuple[GetKubelet, Path]]:
    root = Path(tempfile.mkdtemp(prefix="pr", dir="/tmp"))
    servicer = GetKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pr_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{root / 'kubelet.sock'}")
    server.start()
    yield servicer, root / "kubelet.sock"
    servicer.hold_list.set()
    server.stop(0)
    shutil.rmtree(root, ignore_errors=True)


def _tokens(gpu: int, first: int, n: int = 2) -> list[str]:
    return [f"gpu{gpu}-core{first + i:03d}" for i in range(n)]


def test_concurrent_misses_share_one_list_that_began_after_they_arrived(get_kubelet: tuple[GetKubelet, Path]) -> None:
    """Without Get every start lists; starts that overlap share a List, but never one that
    began before they arrived (it could predate their own assignment)."""
    servicer, socket = get_kubelet
    servicer.supports_get = False
    client = PodResourcesClient(socket)
    servicer.pods = [_pod("first", _tokens(0, 0))]
    servicer.hold_list.clear()
    first = threading.Thread(target=lambda: client.holders_of(_tokens(0, 0)))
    first.start()
    assert servicer.list_entered.wait(2)
    # Assigned after the first List began: only a later List can name them.
    servicer.pods = [_pod("first", _tokens(0, 0))] + [_pod(f"late{i}", _tokens(1, 10 * i)) for i in range(3)]
    answers: dict[int, list[TokenHolder]] = {}
    late = [threading.Thread(target=lambda i=i: answers.__setitem__(i, client.holders_of(_tokens(1, 10 * i)))) for i in range(3)]
    for thread in late:
        thread.start()
    time.sleep(0.1)
    servicer.hold_list.set()
    for thread in [first, *late]:
        thread.join(5)
    assert {i: [h.pod for h in a] for i, a in answers.items()} == {i: [f"late{i}"] for i in range(3)}
    assert servicer.list_calls == 2, "the three late starts should have shared one List"
    client.close()



def test_a_hint_is_confirmed_with_get_and_a_stale_one_falls_back_to_list(get_kubelet: tuple[GetKubelet, Path]) -> None:
    servicer, socket = get_kubelet
    client = PodResourcesClient(socket)
    servicer.pods = [_pod("a", _tokens(0, 0)), _pod("b", _tokens(0, 2))]
    assert [h.pod for h in client.holders_of(_tokens(0, 0))] == ["a"]  # miss: lists
    assert [h.pod for h in client.holders_of(_tokens(0, 2))] == ["b"]  # hit: Get only
    assert (servicer.list_calls, servicer.get_calls) == (1, 1)
    servicer.pods = [_pod("b", _tokens(0, 2)), _pod("c", _tokens(0, 0))]  # a deleted, its tokens reused by c
    assert [h.pod for h in client.holders_of(_tokens(0, 0))] == ["c"]
    assert servicer.list_calls == 2
    client.close()
