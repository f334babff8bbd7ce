"""The device plugin follows the pools file as the agent does: the node's pool entry wins over
its policy labels, and an edit reaches a running plugin (S9: policy edits without restarts).

Driven through the plugin's unix socket (kubelet emulator: Allocate, PreStartContainer) and, for
the flag, through `tessera node device-plugin --pools-file` as a process.
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from dp_harness import POOL, Harness

from tessera.model.contract import GPU_CORE, MPS_ROOT
from tessera.kube.fake import FakeKubeApi
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from tessera_node.deviceplugin.cli import FAKE_POOL
from tessera_node.testing.kubelet_emulator import ContainerView, KubeletEmulator


def _pool(policy: str) -> dict[str, Any]:
    return {"policy": policy, "memoryEnforcement": "warn", "onlineOffline": False}


def _run(h: Harness, name: str) -> ContainerView:
    h.extender.create_and_bind(name, {"main": (20, 1024)})
    h.allocate(name)
    return h.start(name)


def _uses_mps(view: ContainerView) -> bool:
    return any(container_path == MPS_ROOT for container_path, _host, _ro in view.mounts)


@pytest.mark.parametrize(
    ("label", "pools", "expected"),
    [
        ("best-effort", {POOL: _pool("fixed-share")}, "fixed-share"),
        ("fixed-share", {POOL: _pool("best-effort")}, "best-effort"),
        ("fixed-share", {"another-pool": _pool("best-effort")}, "fixed-share"),
        ("best-effort", None, "best-effort"),
        ("fixed-share", "{not json", "fixed-share"),
    ],
    ids=["file says fixed-share", "file says best-effort", "pool not in file: labels", "no file: labels", "unreadable file: labels"],
)
def test_the_pools_file_entry_of_the_nodes_pool_wins_over_its_labels(label: str, pools: Any, expected: str) -> None:
    h = Harness(sharing=label, pools={} if isinstance(pools, str) else pools)
    if isinstance(pools, str):
        assert h.settings.pools_file is not None
        h.settings.pools_file.write_text(pools)
    try:
        h.start_plugin()
        view = _run(h, "p")
        assert view.env["TESSERA_SHARING_POLICY"] == expected
        assert _uses_mps(view) is (expected == "fixed-share"), "MPS pipe directory mounted exactly on fixed-share"
    finally:
        h.close()


def test_an_edit_of_the_pools_file_reaches_the_running_plugin_at_the_next_container() -> None:
    h = Harness(sharing="best-effort", pools={POOL: _pool("fixed-share")})
    try:
        h.start_plugin()
        registrations = len(h.kubelet.registrations)
        assert _uses_mps(_run(h, "before"))
        h.write_pools({POOL: _pool("best-effort")})  # kubelet refreshed the mounted ConfigMap
        after = _run(h, "after")  # straight away: Allocate looks at the file, not only the node poll
        assert after.env["TESSERA_SHARING_POLICY"] == "best-effort" and not _uses_mps(after)
        assert len(h.kubelet.registrations) == registrations, "no restart, no re-registration"
    finally:
        h.close()


@pytest.mark.parametrize("breakage", ["removed", "not JSON", "not an object"])
def test_a_pools_file_that_goes_bad_keeps_the_policy_it_last_said_and_says_why_once(breakage: str, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(sharing="best-effort", pools={POOL: _pool("fixed-share")})
    try:
        h.start_plugin()
        assert _uses_mps(_run(h, "before"))
        assert h.settings.pools_file is not None
        if breakage == "removed":
            h.settings.pools_file.unlink()
        else:
            h.settings.pools_file.write_text("{half" if breakage == "not JSON" else "[]")
        for i in range(3):
            view = _run(h, f"after{i}")
            assert view.env["TESSERA_SHARING_POLICY"] == "fixed-share", "a file that cannot be read must not switch the policy to the labels'"
        warnings = [r.getMessage() for r in caplog.records if "cannot use the pools file" in r.getMessage()]
        assert len(warnings) == 1 and str(h.settings.pools_file) in warnings[0], warnings
        h.write_pools({POOL: _pool("best-effort")})  # fixed: its policy applies again
        assert _run(h, "fixed").env["TESSERA_SHARING_POLICY"] == "best-effort"
    finally:
        h.close()


# --- the flag, through the command ----------------------------------------------------------------

def _allocate_policy(socket: Path) -> str:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        response = dp_grpc.DevicePluginStub(channel).Allocate(
            dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=["gpu0-core000"])]), timeout=5
        )
    return str(response.container_responses[0].envs["TESSERA_SHARING_POLICY"])


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dppf", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_pools_file_flag_sets_the_policy_and_edits_apply_without_restart(root: Path) -> None:
    pools = root / "pools.json"
    pools.write_text(json.dumps({FAKE_POOL: _pool("fixed-share")}))
    kubelet = KubeletEmulator(root / "dp", root / "pr" / "kubelet.sock", FakeKubeApi()).start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tessera.cli.main", "node", "device-plugin", "--simulate", "T4:1", "--fake-kube", "--node-name", "n",
         "--device-plugin-dir", str(root / "dp"), "--pod-resources-socket", str(root / "pr" / "kubelet.sock"),
         "--state-dir", str(root / "state"), "--pools-file", str(pools)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert kubelet.wait_for(lambda: len(kubelet.devices(GPU_CORE)) == 100, 20.0), "the command did not register"
        socket = root / "dp" / "tessera-gpu-core.sock"
        assert _allocate_policy(socket) == "fixed-share"
        pools.write_text(json.dumps({FAKE_POOL: _pool("best-effort")}))
        assert _allocate_policy(socket) == "best-effort"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        kubelet.stop()
