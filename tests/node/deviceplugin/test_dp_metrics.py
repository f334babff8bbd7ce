"""The device plugin's /metrics, scraped over HTTP from the real plugin against the kubelet emulator."""
from __future__ import annotations

import select
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dp_harness import Harness, wait_until
from prometheus_client.parser import text_string_to_metric_families

from tessera.model.contract import GPU_CORE
from tessera.kube.fake import FakeKubeApi
from tessera.monitoring.exposition import conformance_problems
from tessera_node.deviceplugin.metrics import METRICS, serve_metrics
from tessera_node.testing.kubelet_emulator import KubeletEmulator, StartFailed


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def served() -> Iterator[tuple[Harness, int]]:
    harness = Harness(spec="T4:3")
    plugin = harness.start_plugin()
    server, _thread, port = serve_metrics(plugin.metrics_view, "127.0.0.1", 0)
    yield harness, port
    server.shutdown()
    harness.close()


def test_metrics_page_serves_exactly_the_declared_families(served: tuple[Harness, int]) -> None:
    _, port = served
    assert conformance_problems(METRICS, _scrape(port)) == []


def test_registration_and_gpu_health_as_kubelet_and_nvml_see_them(served: tuple[Harness, int]) -> None:
    node, port = served
    # kubelet has the registration a moment before the plugin's Register call returns
    assert wait_until(lambda: _values(_scrape(port))[("tessera_device_plugin_registered", (("resource", GPU_CORE),))] == 1.0)
    values = _values(_scrape(port))
    assert values[("tessera_device_plugin_registrations_total", (("resource", GPU_CORE), ("result", "ok")))] == 1.0
    assert values[("tessera_device_plugin_gpus", (("health", "healthy"),))] == 3.0
    # a critical Xid takes a GPU out; kubelet's restart costs one more registration
    node.backend.inject_xid(1, 79)
    node.kubelet.restart()
    assert wait_until(lambda: _values(_scrape(port))[("tessera_device_plugin_gpus", (("health", "unhealthy"),))] == 1.0)
    assert wait_until(lambda: _values(_scrape(port))[("tessera_device_plugin_registrations_total", (("resource", GPU_CORE), ("result", "ok")))] == 2.0)
    assert _values(_scrape(port))[("tessera_device_plugin_registered", (("resource", GPU_CORE),))] == 1.0


def test_container_starts_are_counted_accepted_and_rejected(served: tuple[Harness, int]) -> None:
    node, port = served
    node.extender.create_and_bind("ok", {"main": (40, 2048)})
    node.allocate("ok")
    node.start("ok")
    limits = {"limits": {GPU_CORE: "30"}}
    node.kube.create_pod({"metadata": {"name": "stray", "namespace": "default"}, "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "main", "resources": limits}]}})
    node.allocate("stray")
    with pytest.raises(StartFailed, match="no tessera.dev/allocation record"):
        node.start("stray")  # bypassed tessera-scheduler: PreStartContainer refuses it
    values = _values(_scrape(port))
    assert values[("tessera_device_plugin_container_starts_total", (("result", "accepted"),))] == 1.0
    assert values[("tessera_device_plugin_container_starts_total", (("result", "rejected"),))] == 1.0


def test_a_stopped_plugin_reports_itself_unregistered(served: tuple[Harness, int]) -> None:
    node, port = served
    node.stop_plugin()
    assert _values(_scrape(port))[("tessera_device_plugin_registered", (("resource", GPU_CORE),))] == 0.0


def test_the_command_serves_metrics_on_its_port() -> None:
    root = Path(tempfile.mkdtemp(prefix="dpm", dir="/tmp"))
    kubelet = KubeletEmulator(root / "dp", root / "pr" / "kubelet.sock", FakeKubeApi()).start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tessera.cli.main", "node", "device-plugin", "--simulate", "T4:2", "--device-plugin-dir", str(root / "dp"),
         "--pod-resources-socket", str(root / "pr" / "kubelet.sock"), "--state-dir", str(root / "state"), "--node-name", "m-node",
         "--fake-kube", "--metrics-host", "127.0.0.1", "--metrics-port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        port = 0
        assert proc.stderr is not None
        while not port and select.select([proc.stderr], [], [], 20)[0]:
            line = proc.stderr.readline()
            if not line:
                break
            if "metrics on http://" in line:
                port = int(line.rsplit(":", 1)[1].split("/", 1)[0])
        assert port, "the command did not say where it serves metrics"
        assert kubelet.wait_for(lambda: len(kubelet.devices(GPU_CORE)) == 200, 20.0)
        assert wait_until(lambda: _values(_scrape(port))[("tessera_device_plugin_registered", (("resource", GPU_CORE),))] == 1.0, 10.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
        kubelet.stop()
