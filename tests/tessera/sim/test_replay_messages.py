"""What `tessera sim replay` tells the user: pods arrived, placed and failed, and the share of capacity."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tessera.cli.main import main

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\nn2,64000,262144,4,A10\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
    "a,1000,1024,1,400\nb,1000,1024,1,400\nc,1000,1024,1,1000\nd,1000,1024,4,1000\ne,500,512,0,0\nf,1000,1024,2,1000\n"
)
ARRIVED = re.compile(r"^  arrived (\d+) pods \((\d+) from the trace(?: \+ (\d+) sampled from it to reach ([\d.]+)x capacity)?\), "
                     r"requesting ([\d.]+) % of GPU capacity$", re.M)
PLACED = re.compile(r"^  placed  (\d+) \([\d.]+ %\) pods, allocating ([\d.]+) % of GPU capacity$", re.M)
FAILED = re.compile(r"^  failed  (\d+) \([\d.]+ %\) pods \(fit on no node; not retried\)(.*)$", re.M)


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    code = main(["sim", "replay", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--no-progress", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_replay_says_what_was_replayed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(tmp_path, capsys)
    assert code == 0
    assert out.startswith("replayed pods.csv on nodes.csv: 2 GPU nodes, 6 GPUs; policy fragmentation-aware, creation order, seed 42\n")
    arrived, placed, failed = ARRIVED.search(out), PLACED.search(out), FAILED.search(out)
    assert arrived and placed and failed, out
    assert arrived.group(1) == arrived.group(2) == "6" and arrived.group(3) is None  # no inflation asked
    # 0.4 + 0.4 + 1 + 4 + 2 GPUs of 6 requested
    assert float(arrived.group(5)) == pytest.approx(7.8 / 6 * 100, abs=0.01)
    assert int(placed.group(1)) + int(failed.group(1)) == 6
    assert float(placed.group(2)) <= 100.0
    if int(failed.group(1)):
        assert "asking" in failed.group(2)  # which shapes failed, in words ("2 GPUs", "0.4 GPU")


def test_inflated_replay_counts_sampled_pods_and_agrees_with_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(tmp_path, capsys, "--order", "shuffle", "--inflate", "2", "--json")
    assert code == 0
    data = json.loads(out)  # stdout stays pure JSON; the summary goes to stderr
    arrived, placed, failed = ARRIVED.search(err), PLACED.search(err), FAILED.search(err)
    assert arrived and placed and failed, err
    total, from_trace, sampled = int(arrived.group(1)), int(arrived.group(2)), int(arrived.group(3))
    assert from_trace == 6 and sampled > 0 and total == from_trace + sampled and arrived.group(4) == "2"
    assert float(arrived.group(5)) >= 200.0
    final = data["points"][-1]
    assert float(arrived.group(5)) == pytest.approx(final["arrived_pct"], abs=0.01)
    assert float(placed.group(2)) == pytest.approx(final["allocated_pct"], abs=0.01)
    assert int(failed.group(1)) == final["failed_pods"] and int(placed.group(1)) + int(failed.group(1)) == total


def test_failed_shapes_are_named_in_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,1,T4\n")
    (tmp_path / "pods.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nbig,1,1,2,1000\nshare,1,1,1,700\nshare2,1,1,1,700\n")
    assert main(["sim", "replay", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "  failed  2 (66.7 %) pods (fit on no node; not retried): 1 asking 0.7 GPU, 1 asking 2 GPUs\n" in out


def test_progress_reaches_a_log_that_is_not_a_terminal(tmp_path: Path) -> None:
    """In CI or through a pipe there is no bar to redraw: plain lines, the last one at the end."""
    import subprocess
    import sys

    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    trace = ["--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv")]
    replay = subprocess.run([sys.executable, "-m", "tessera.cli.main", "sim", "replay", *trace], capture_output=True, text=True, timeout=120)
    assert replay.returncode == 0, replay.stderr
    assert re.fullmatch(r"replay fragmentation-aware: 6/6 pods, [\d.]+ s", replay.stderr.splitlines()[-1]), replay.stderr
    assert "\r" not in replay.stderr
    compare = subprocess.run(
        [sys.executable, "-m", "tessera.cli.main", "sim", "compare", *trace, "--policies", "binpack,fgd", "--seeds", "1", "--out", str(tmp_path / "cmp")],
        capture_output=True, text=True, timeout=300,
    )
    assert compare.returncode == 0, compare.stderr
    assert [line.split(":")[0] for line in compare.stderr.splitlines()] == ["binpack seed 1", "fgd seed 1"], compare.stderr
    quiet = subprocess.run([sys.executable, "-m", "tessera.cli.main", "sim", "replay", *trace, "--no-progress"], capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == ""
