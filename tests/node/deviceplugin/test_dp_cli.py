"""`tessera node device-plugin` as a process, against the kubelet emulator."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tessera.contract import GPU_CORE
from tessera.kube.fake import FakeKubeApi
from tessera_node.testing.kubelet_emulator import KubeletEmulator


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tessera.cli.main", "node", "device-plugin", *args]


def test_device_plugin_command_registers_serves_and_exits_cleanly_on_sigterm() -> None:
    root = Path(tempfile.mkdtemp(prefix="dpcli", dir="/tmp"))
    kubelet = KubeletEmulator(root / "dp", root / "pr" / "kubelet.sock", FakeKubeApi()).start()
    proc = subprocess.Popen(
        _cli("--simulate", "T4:1,A10:2", "--device-plugin-dir", str(root / "dp"), "--pod-resources-socket", str(root / "pr" / "kubelet.sock"),
             "--state-dir", str(root / "state"), "--node-name", "cli-node", "--fake-kube", "--metrics-port", "0"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert kubelet.wait_for(lambda: len(kubelet.devices(GPU_CORE)) == 300, 20.0), "the command did not register 3 GPUs"
        assert sorted({d.split("-")[0] for d in kubelet.devices(GPU_CORE)}) == ["gpu0", "gpu1", "gpu2"]
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert not (root / "dp" / "tessera-gpu-core.sock").exists(), "socket left behind after shutdown"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--simulate", "H100-80GB:zero", "--fake-kube", "--node-name", "n"], "bad GPU count"),
        (["--simulate", "T4"], "no node name"),
    ],
)
def test_user_mistakes_get_a_message_not_a_traceback(args: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    result = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
