"""`tessera sim` through a real subprocess, as a user runs it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NODES = "sn,cpu_milli,memory_mib,gpu,model,gpu_mem_mib\nn1,64000,262144,2,T4,16384\nn2,64000,262144,4,A10,24576\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_mem_mib\n"
    "a,1000,1024,1,400,4096\nb,1000,1024,1,400,\nc,1000,1024,1,1000,\nd,1000,1024,2,1000,\ne,500,512,0,0,\nf,1000,1024,1,650,20000\n"
)


def tessera(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tessera.cli.main", *args], capture_output=True, text=True, timeout=120)


def trace(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return str(tmp_path / "nodes.csv"), str(tmp_path / "pods.csv")


def test_replay_json_has_the_documented_point_list(tmp_path: Path) -> None:
    nodes, pods = trace(tmp_path)
    run = tessera("sim", "replay", "--nodes", nodes, "--pods", pods, "--order", "shuffle", "--inflate", "1.3", "--seed", "42", "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert set(data) == {"capacity_gpus", "points"} and data["capacity_gpus"] == 6
    xs = [p["arrived_pct"] for p in data["points"]]
    assert xs[:-1] == sorted([float(x) for x in range(5, 131, 5)] + [98.0]) and xs[-1] >= 130
    for p in data["points"]:
        assert set(p) == {"arrived_pct", "allocated_pct", "failed_pods"}
        assert p["allocated_pct"] <= p["arrived_pct"] + 1e-9


def test_replay_table_names_the_default_policy(tmp_path: Path) -> None:
    nodes, pods = trace(tmp_path)
    run = tessera("sim", "replay", "--nodes", nodes, "--pods", pods)
    assert run.returncode == 0, run.stderr
    assert "policy fragmentation-aware" in run.stdout and "allocated %" in run.stdout


def test_bad_input_exits_2_with_a_message_not_a_traceback(tmp_path: Path) -> None:
    nodes, _ = trace(tmp_path)
    missing = tessera("sim", "replay", "--nodes", nodes, "--pods", str(tmp_path / "nope.csv"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    policy = tessera("sim", "replay", "--nodes", nodes, "--pods", nodes, "--policy", "magic")
    assert policy.returncode == 2 and "fragmentation-aware" in policy.stderr


def test_compare_writes_table_and_png(tmp_path: Path) -> None:
    nodes, pods = trace(tmp_path)
    out = tmp_path / "out"
    run = tessera("sim", "compare", "--nodes", nodes, "--pods", pods, "--policies", "fgd,binpack,spread",
                  "--seeds", "42-43", "--order", "shuffle", "--inflate", "1.3", "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert "fgd" in run.stdout and "spread" in run.stdout
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "binpack" in (out / "compare.txt").read_text()
