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

from tessera.model.contract import GPU_CORE
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
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert not (root / "dp" / "tessera-gpu-core.sock").exists(), "socket left behind after shutdown"
        assert out.splitlines() == [
            f"ready: serving tessera.dev/gpu-core (300 devices on 3 GPUs: 2 x A10, 1 x T4) on {root / 'dp' / 'tessera-gpu-core.sock'}, "
            f"registered with kubelet at {root / 'dp' / 'kubelet.sock'}; tessera.dev/gpu-memory {2 * 23028 + 15360} MiB published as node capacity"
        ], "one ready line on stdout, naming the socket and what it serves"
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
        (["--pools-file", "{root}/missing.json"], "error: --pools-file {root}/missing.json: no such file"),
        (["--pools-file", "{root}"], "error: --pools-file {root}: cannot read: Is a directory"),
        (["--pools-file", "{root}/broken.json"], "error: --pools-file {root}/broken.json:2: not JSON: Expecting value"),
        (["--pools-file", "{root}/list.json"], "error: --pools-file {root}/list.json: expected a JSON object of pool name -> pool settings, found list"),
        (["--state-dir", "{root}/list.json/state"], "error: --state-dir {root}/list.json/state: Not a directory"),
    ],
    ids=["bad spec", "no node", "pools file missing", "pools file is a directory", "pools file not JSON", "pools file not an object", "state dir unusable"],
)
def test_user_mistakes_get_one_line_naming_the_path_not_a_traceback(args: list[str], message: str, tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('{"pool-a":\n  ,}')
    (tmp_path / "list.json").write_text("[]")
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "TESSERA_POOLS_FILE")} | {"TMPDIR": str(tmp_path)}
    base = [] if "--simulate" in args else ["--simulate", "T4:1", "--fake-kube", "--node-name", "n"]
    result = subprocess.run(_cli(*base, *(a.format(root=tmp_path) for a in args)), capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message.format(root=tmp_path) in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_demo_writes_only_under_the_temp_directory() -> None:
    """`--simulate ... --fake-kube` as a normal user: kubelet's and the agent's directories move
    under $TMPDIR/tessera-<node>/ unless given."""
    tmp_path = Path(tempfile.mkdtemp(prefix="dpdemo", dir="/tmp"))  # short: unix socket paths end at 107 bytes
    root = tmp_path / "tessera-demo"
    kubelet = KubeletEmulator(root / "device-plugins", root / "pod-resources" / "kubelet.sock", FakeKubeApi()).start()
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "TESSERA_POOLS_FILE")} | {"TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(_cli("--simulate", "T4:1", "--fake-kube", "--node-name", "demo"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert kubelet.wait_for(lambda: len(kubelet.devices(GPU_CORE)) == 100, 20.0), "the demo did not register with a kubelet in the temp directory"
        assert (root / "agent").is_dir(), "the registry lives under the temp directory"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert out.startswith(f"ready: serving tessera.dev/gpu-core (100 devices on 1 GPU: 1 x T4) on {root / 'device-plugins' / 'tessera-gpu-core.sock'}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        kubelet.stop()
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_demo_with_its_own_kubelet_reaches_ready_offline_and_stops_cleanly() -> None:
    """`--simulate ... --fake-kube --kubelet-emulator`: nothing else running, as a user tries it."""
    tmp_path = Path(tempfile.mkdtemp(prefix="dpkub", dir="/tmp"))
    root = tmp_path / "tessera-sim-node"
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "TESSERA_POOLS_FILE")} | {"TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(_cli("--simulate", "H200-141GB:8", "--fake-kube", "--kubelet-emulator", "--metrics-port", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until ready: (or EOF if it died)
        assert line.startswith(f"ready: serving tessera.dev/gpu-core (800 devices on 8 GPUs: 8 x H200-141GB) on {root / 'device-plugins' / 'tessera-gpu-core.sock'}"), line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert not (root / "device-plugins" / "tessera-gpu-core.sock").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_kubelet_emulator_is_only_for_the_demo(tmp_path: Path) -> None:
    result = subprocess.run(_cli("--simulate", "T4:1", "--node-name", "n", "--kubelet-emulator"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --kubelet-emulator stands in for kubelet in a demo; it needs --fake-kube"
