"""The advertising scheme fits kubelet's 4 MiB gRPC limit on the largest node (8 x H200 141 GB)
while GPU memory is still accounted at our finest granularity, 1 MiB."""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
from dp_harness import Harness, wait_until

from tessera.model.contract import GPU_CORE, GPU_MEMORY
from tessera.kube.fake import FakeKubeApi
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from tessera_node.deviceplugin.plugin import inventory_from_backend
from tessera_node.deviceplugin.registration import register
from tessera_node.deviceplugin.server import list_and_watch_response
from tessera_node.gpu.simulated import SimulatedBackend
from tessera_node.gpu.spec import KNOWN_MODELS_MIB
from tessera_node.testing.kubelet_emulator import KubeletEmulator
from tessera_node.testing.kubelet_versions import MAX_MESSAGE_BYTES

H200_MIB = KNOWN_MODELS_MIB["H200-141GB"]


def test_the_exact_list_and_watch_message_on_8_h200_is_far_under_the_limit() -> None:
    """ByteSize of the message the servicer sends, all healthy and in the largest case (every
    device Unhealthy: the longest health string)."""
    backend = SimulatedBackend.from_spec("H200-141GB:8", node_seed="n")
    backend.open()
    inventory = inventory_from_backend(backend)
    healthy = list_and_watch_response(inventory).ByteSize()
    worst = list_and_watch_response(inventory.all_unhealthy()).ByteSize()
    assert len(list_and_watch_response(inventory).devices) == 800
    assert healthy <= worst < MAX_MESSAGE_BYTES // 100, f"{worst} bytes: more than 1 % of kubelet's limit"


def test_on_the_wire_the_h200_node_stays_under_kubelets_limit_and_memory_is_counted_per_mib() -> None:
    h = Harness(spec="H200-141GB:8")
    try:
        h.start_plugin()
        h.backend.set_responsive(3, False)  # a health update is a second full message
        assert h.kubelet.wait_for(lambda: "Unhealthy" in h.kubelet.devices(GPU_CORE).values())
        plugin = h.kubelet.plugin(GPU_CORE)
        assert plugin is not None and len(plugin.message_sizes) >= 2
        assert max(plugin.message_sizes) < MAX_MESSAGE_BYTES
        assert len(h.kubelet.devices(GPU_CORE)) == 800
        # memory at 1 MiB granularity goes through node capacity, not through ListAndWatch
        assert wait_until(lambda: h.kube.get_node("gpu-node-1")["status"]["capacity"][GPU_MEMORY] == str(7 * H200_MIB))
    finally:
        h.close()


class _PerMibPlugin(dp_grpc.DevicePluginServicer):
    """What advertising memory as one device per MiB would send: just over 4 MiB here (a fifth of
    one H200; the whole node would be 31 MB)."""

    def GetDevicePluginOptions(self, request: dp.Empty, context: grpc.ServicerContext) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions()

    def ListAndWatch(self, request: dp.Empty, context: grpc.ServicerContext) -> Iterator[dp.ListAndWatchResponse]:
        yield dp.ListAndWatchResponse(devices=[dp.Device(ID=f"gpu0-mem{n:06d}", health="Healthy") for n in range(160_000)])


def test_kubelets_limit_is_real_in_the_emulator() -> None:
    """The control: a message over 4 MiB breaks the stream, as grpc-go's default limit in kubelet
    does, so the tests above would see an advertising scheme that does not fit."""
    root = Path(tempfile.mkdtemp(prefix="dpmib", dir="/tmp"))
    kubelet = KubeletEmulator(root / "dp", root / "pr" / "kubelet.sock", FakeKubeApi()).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
    dp_grpc.add_DevicePluginServicer_to_server(_PerMibPlugin(), server)
    server.add_insecure_port(f"unix://{root / 'dp' / 'mib.sock'}")
    server.start()
    try:
        register(root / "dp" / "kubelet.sock", "mib.sock", "example.com/gpu-memory")
        assert kubelet.wait_for(lambda: (p := kubelet.plugin("example.com/gpu-memory")) is not None and not p.stream_open, 20)
        assert kubelet.devices("example.com/gpu-memory") == {}, "kubelet never sees a message over its limit"
    finally:
        server.stop(0)
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
