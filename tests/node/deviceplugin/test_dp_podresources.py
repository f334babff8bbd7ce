"""The PodResources client over a real unix socket, including kubelets without `Get`."""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from tessera.contract import GPU_CORE
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
