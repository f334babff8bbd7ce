"""`tessera node agent` through the real command line: clear errors, no tracebacks."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def tessera(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tessera.cli.main", "node", "agent", *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--node-name", ""], "no node name"),
        (["--simulate", "NOPE:1", "--node-name", "n"], "unknown GPU model"),
        (["--simulate", "T4:1", "--node-name", "n", "--metrics-port", "70000"], "is not a TCP port"),
    ],
)
def test_user_mistakes_get_a_message_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    done = tessera(*args, "--state-dir", str(tmp_path / "state"), "--cgroup-root", str(tmp_path), "--no-kube")
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_corrupt_registry_says_how_to_recover(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "registry.json").write_text("{")
    done = tessera("--simulate", "T4:1", "--node-name", "n", "--state-dir", str(state), "--cgroup-root", str(tmp_path), "--no-kube")
    assert done.returncode == 2
    assert "delete it and restart the agent" in done.stderr and "Traceback" not in done.stderr
