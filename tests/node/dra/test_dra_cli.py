"""`tessera-node dra-plugin`: a demo that registers with the emulated kubelet and prints ready:,
a clean stop on SIGTERM, and exit 2 with a clear message for input that cannot work."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tessera_node.demo_paths import demo_root


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tessera_node.cli", "dra-plugin", *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "TESSERA_POOLS_FILE")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return env


@pytest.mark.parametrize("kubelet", ["1.34", "1.36"])
def test_the_demo_registers_with_the_emulated_kubelet_and_stops_on_sigterm(kubelet: str) -> None:
    node = f"dra-{uuid.uuid4().hex[:6]}"
    proc = subprocess.Popen(
        _cmd("--simulate", "T4:2", "--fake-kube", "--kubelet-emulator", kubelet, "--node-name", node),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready: DRA driver gpu.tessera.dev serving 2 x T4 on "), line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        assert str(demo_root(node) / "plugins" / "gpu.tessera.dev" / "dra.sock") in line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert not (demo_root(node) / "plugins_registry" / "gpu.tessera.dev-reg.sock").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(demo_root(node), ignore_errors=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--simulate", "T4:1", "--kubelet-emulator", "1.36", "--node-name", "n"], "--kubelet-emulator stands in for kubelet in a demo; it needs --fake-kube"),
        (["--simulate", "T4:1"], "no node name; pass --node-name or set NODE_NAME"),
        (["--simulate", "Q9:1", "--fake-kube", "--node-name", "n"], "Q9"),
        (["--simulate", "T4:1", "--node-name", "n", "--registry-dir", "/proc/none"], "--registry-dir /proc/none:"),
    ],
)
def test_bad_input_is_exit_2_with_a_clear_message(args: list[str], message: str) -> None:
    result = subprocess.run(_cmd(*args), capture_output=True, text=True, timeout=60, env=_env(), check=False)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_bad_pools_file_and_a_damaged_checkpoint_are_exit_2(tmp_path: Path) -> None:
    pools = tmp_path / "pools.json"
    pools.write_text("{not json")
    base = ["--simulate", "T4:1", "--fake-kube", "--node-name", "n", "--state-dir", str(tmp_path / "state"), "--registry-dir", str(tmp_path / "r"),
            "--plugins-dir", str(tmp_path / "p"), "--cdi-dir", str(tmp_path / "cdi")]
    result = subprocess.run(_cmd(*base, "--pools-file", str(pools)), capture_output=True, text=True, timeout=60, env=_env(), check=False)
    assert result.returncode == 2 and "--pools-file" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "dra-checkpoint.json").write_text("{")
    result = subprocess.run(_cmd(*base), capture_output=True, text=True, timeout=60, env=_env(), check=False)
    assert result.returncode == 2 and "the DRA checkpoint" in result.stderr and "Traceback" not in result.stderr
