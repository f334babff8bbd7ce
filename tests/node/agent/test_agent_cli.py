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


@pytest.mark.parametrize(
    ("flag", "content", "message"),
    [
        ("--simulate-processes", None, "--simulate-processes {path}: cannot read: No such file or directory"),
        ("--simulate-processes", '{"processes": [', "--simulate-processes {path}:1: not JSON: Expecting value"),
        ("--simulate-processes", '{"processes": [{"gpu": 0}]}', "--simulate-processes {path}: not a process list (KeyError: 'pid')"),
        ("--pools-file", None, "--pools-file {path}: no such file"),
        ("--pools-file", "[1]", "--pools-file {path}: expected a JSON object"),
    ],
    ids=["procs file missing", "procs file not JSON", "procs file without pid", "pools file missing", "pools file not an object"],
)
def test_input_files_that_cannot_be_used_stop_the_start_with_their_path(tmp_path: Path, flag: str, content: str | None, message: str) -> None:
    path = tmp_path / "input.json"
    if content is not None:
        path.write_text(content)
    done = tessera("--simulate", "T4:1", "--node-name", "n", "--state-dir", str(tmp_path / "state"), "--cgroup-root", str(tmp_path), "--no-kube", flag, str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message.format(path=path) in lines[0], done.stderr


def test_a_simulated_agent_keeps_its_state_under_the_temp_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tessera.cli.main import build_parser
    from tessera_node.agent.cli import settings_from_args

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # tempfile caches the directory it found first
    demo = settings_from_args(build_parser().parse_args(["node", "agent", "--simulate", "T4:1", "--node-name", "n1"]))
    assert demo.state_dir == tmp_path / "tessera-n1" / "agent", "the same directory `device-plugin --fake-kube --node-name n1` uses"
    node = settings_from_args(build_parser().parse_args(["node", "agent", "--node-name", "n1"]))
    assert str(node.state_dir) == "/var/lib/tessera/agent"
    given = settings_from_args(build_parser().parse_args(["node", "agent", "--simulate", "T4:1", "--state-dir", "/var/lib/tessera/agent"]))
    assert str(given.state_dir) == "/var/lib/tessera/agent", "a path given on the command line is used as given"
