"""The advertising scheme fits kubelet's 4 MiB gRPC limit on the largest node, measured on the wire."""
from __future__ import annotations

from dp_harness import Harness, wait_until

from tessera.model.contract import GPU_CORE, GPU_MEMORY

KUBELET_MAX_MESSAGE = 4 * 1024 * 1024


def test_list_and_watch_on_8_h200_stays_under_kubelets_message_limit() -> None:
    h = Harness(spec="H200-141GB:8")
    try:
        h.start_plugin()
        h.backend.set_responsive(3, False)  # a health update is a second full message
        assert h.kubelet.wait_for(lambda: "Unhealthy" in h.kubelet.devices(GPU_CORE).values())
        plugin = h.kubelet.plugin(GPU_CORE)
        assert plugin is not None and len(plugin.message_sizes) >= 2
        assert max(plugin.message_sizes) < KUBELET_MAX_MESSAGE
        assert len(h.kubelet.devices(GPU_CORE)) == 800
        # memory at 1 MiB granularity goes through node capacity instead of devices
        assert wait_until(lambda: h.kube.get_node("gpu-node-1")["status"]["capacity"][GPU_MEMORY] == str(7 * 143771))
    finally:
        h.close()
