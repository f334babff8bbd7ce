"""The GPU checks as a lent machine runs them: run-on-gpu.sh and run_gpu_checks.py end to end.

Here there is no GPU: without PyTorch the script must exit 2 with a report saying what is missing
and where to run. With the fake GPU (fakegpu/: PyTorch, pynvml and nvidia-cuda-mps-control test
doubles; every Tessera module real) every check must run to the end through the production
agent, MPS supervisor and freezer, and leave nothing behind.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from gpucheck_paths import CHECKS_DIR, REPO

RUN_ON_GPU = CHECKS_DIR / "run-on-gpu.sh"
SCRIPT = CHECKS_DIR / "run_gpu_checks.py"
FAST = ["--seconds", "2", "--pattern", "1.5:2.5", "--cycles", "2"]

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a real GPU machine: run run-on-gpu.sh itself")


def run_checks(env: dict[str, str], out: Path, *args: str, timeout: float = 400) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run([sys.executable, str(SCRIPT), "--output", str(out / "r.json"), "--artifacts", str(out), *args],
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return done.returncode, json.loads((out / "r.json").read_text()), done.stdout + done.stderr


def live_fake_gpu_processes(state: Path) -> list[int]:
    alive = []
    for path in state.glob("*.json"):
        pid = int(path.stem)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X"):
            alive.append(pid)
    return alive


def test_run_on_gpu_here_exits_2_and_says_what_to_install_and_where_to_run(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(OUT=str(tmp_path / "out"), PYTHON=sys.executable)
    done = subprocess.run(["bash", str(RUN_ON_GPU)], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "gpu-checks.json").read_text())
    assert report["status"] == "skipped" and report["exit_code"] == 2
    assert "PyTorch" in report["reason"] and "bash node-agent/gpu-checks/run-on-gpu.sh" in report["reason"]
    assert set(report["checks"]) == {"nvml", "overhead", "mps", "besteffort", "memory", "colocation", "burst", "dra"}
    assert all(c["status"] == "skipped" for c in report["checks"].values())
    # the tail a remote tool shows ends with the summary and the reason
    assert "== GPU checks summary (exit 2) ==" in done.stdout and "reason: PyTorch" in done.stdout
    assert done.stdout.rstrip().endswith(f"exit 2; report {tmp_path / 'out' / 'gpu-checks.json'}")


def test_run_on_gpu_brings_its_dependencies_from_the_committed_wheels(tmp_path: Path) -> None:
    """A Python with neither pynvml nor prometheus_client nor pip (as on a bare GPU machine)."""
    wheels = sorted(p.name for p in (CHECKS_DIR / "wheels").glob("*.whl"))
    assert [w.split("-")[0] for w in wheels] == ["nvidia_ml_py", "prometheus_client"]
    assert sum(p.stat().st_size for p in (CHECKS_DIR / "wheels").glob("*.whl")) < 2 * 1024 * 1024
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    bare = str(venv / "bin" / "python")
    assert subprocess.run([bare, "-c", "import pynvml"], capture_output=True, check=False).returncode != 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OUT=str(tmp_path / "out"), PYTHON=bare)
    done = subprocess.run(["bash", str(RUN_ON_GPU)], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "importing nvidia-ml-py prometheus-client from the wheel files" in done.stdout
    environment = json.loads((tmp_path / "out" / "gpu-checks.json").read_text())["environment"]
    assert environment["pynvml_error"] is None and environment["prometheus_error"] is None
    assert environment["nvml_error"]  # pynvml imported, and says there is no driver here


@pytest.mark.slow
def test_every_check_runs_end_to_end_on_the_fake_gpu_and_leaves_nothing_behind(tmp_path: Path, fake_gpu_env: dict[str, str]) -> None:
    env = {**fake_gpu_env, "FAKEGPU_PID_OFFSET": "4000000"}  # NVML seen from another PID namespace
    code, report, log = run_checks(env, tmp_path, *FAST)
    checks = report["checks"]
    assert code in (0, 1), log
    assert {name: c["status"] for name, c in checks.items() if c["status"] not in ("ok", "failed")} == {}, json.dumps(checks, indent=1)[:4000]

    assert "mapped" in checks["nvml"]["pids"] and checks["nvml"]["worker_memory_mib_max"] >= 1024
    assert checks["nvml"]["activity_seen_after_ms"] is not None
    # what the agent's NVML sampling costs, wall and CPU, call by call (the agent's CPU on a real node)
    assert checks["nvml"]["processes_call_cpu_ms_mean"] >= 0
    # the driver's sample period, from the timestamps collected over the run (the fake samples every 0.1 s)
    assert checks["nvml"]["process_util_sample_period_ms"] == 100.0
    assert set(checks["nvml"]["nvml_call_ms"]) == {"nvmlDeviceGetProcessUtilization", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses"}

    overhead = checks["overhead"]
    assert [r["path"] for r in overhead["runs"]] == ["native", "mps-100%", "mps-100%", "native"]
    assert all(r.get("mps_clients", 1) == 1 for r in overhead["runs"]) and overhead["value"] is not None

    mps = checks["mps"]
    # the fake H100 reports 16896 cores at compute 9.0: 132 SMs, so 60 % asks MPS for 61 (80 SMs, not 78)
    assert mps["sm_count"] == 132
    assert len(mps["mps"]["clients"]) == 2 and mps["client_env"]["60%"] == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "61"}
    assert mps["client_env"]["30%"] == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "31"}
    assert list(mps["daemon_defaults"].values()) == [{"active_thread_pct": 61, "pinned_mem_mib": None}]
    assert 1.5 < mps["value"] < 2.5  # the fake GPU scales speed with the thread percentage
    assert mps["stop"]["still_running_after_stop"] == []

    agent_kill = checks["memory"]["agent_kill"]
    assert agent_kill["hog_exit_code"] == -signal.SIGKILL and agent_kill["kills_counted"] == {"main": 1}
    assert agent_kill["compliant_neighbour"] == "alive" and agent_kill["agent_error"] is None
    pinned = checks["memory"]["mps_pinned_limit"]["clients"]
    assert pinned["mps-mem-env"]["limit_from"] == "0=2048M" and pinned["mps-mem-env"]["allocated_mib"] <= 2048
    assert pinned["mps-mem-no-env"]["allocated_mib"] <= 3072 and all(p["capped"] for p in pinned.values())

    colo = checks["colocation"]
    assert colo["pattern"]["on_s"] == 1.5 and colo["pattern"]["offline_resume_idle_s"] == 2.0 and colo["warning"] is None
    freeze = colo["freeze_effective_after_burst_start"]
    assert freeze["n"] == 2 and freeze["missed"] == 0 and freeze["max_ms"] < 1500
    assert colo["resume_decided_after_burst_end"]["missed"] == 0 and colo["offline_share_of_gpu"] > 0
    assert colo["thawed_at_shutdown"] == [] and colo["agent_error"] is None

    burst = checks["burst"]
    assert burst["throttle_events"] > 0 and all(n > 0 for n in burst["freezes"].values())
    assert 1.4 < burst["value"] < 2.6

    # the DRA route: the plugin prepared both claims (kubelet 1.36 emulator, real sockets) and the
    # agent killed the hog over its claim's memory from the records the plugin registered
    dra = checks["dra"]
    assert dra["status"] == "ok", json.dumps(dra, indent=1)[:3000]
    assert dra["dra"]["service"] == "v1.DRAPlugin" and dra["dra"]["slice_devices"] == ["gpu-0"]
    assert {e["TESSERA_GPU_MEMORY_MIB"] for e in dra["dra"]["cdi_env"].values()} == {"2048"}
    assert dra["agent_kill"]["hog_exit_code"] == -signal.SIGKILL and dra["agent_kill"]["compliant_neighbour"] == "alive"

    assert live_fake_gpu_processes(Path(env["FAKEGPU_STATE"])) == []
    # this run's own cgroup (named in the report) is gone; other runs on the machine may hold theirs
    if not report["cgroups"].startswith("emulated"):
        own = re.search(r"\((/sys/fs/cgroup/[^)]*tessera-gpu-checks-\d+)\)", report["cgroups"])
        assert own is not None, report["cgroups"]
        assert not Path(own.group(1)).exists()
    assert "== GPU checks summary" in log


def test_the_emulated_freezer_pauses_through_the_same_agent(tmp_path: Path, fake_gpu_env: dict[str, str]) -> None:
    """Where /sys/fs/cgroup is not writable (an unprivileged container) the agent's freezes land in
    cgroup files that an emulator applies as SIGSTOP/SIGCONT; the report says so."""
    code, report, log = run_checks(fake_gpu_env, tmp_path, "--only", "colocation", "--freezer", "emulated", *FAST)
    colo = report["checks"]["colocation"]
    assert colo["status"] in ("ok", "failed"), log
    assert report["cgroups"].startswith("emulated") and colo["pause_method"].startswith("emulated")
    assert colo["freeze_effective_after_burst_start"]["missed"] == 0 and colo["freeze_effective_after_burst_start"]["n"] == 2
    assert live_fake_gpu_processes(Path(fake_gpu_env["FAKEGPU_STATE"])) == []


def test_exclusive_process_mode_skips_what_cannot_share_and_runs_the_rest(tmp_path: Path, fake_gpu_env: dict[str, str]) -> None:
    env = {**fake_gpu_env, "FAKEGPU_COMPUTE_MODE": "3"}
    code, report, log = run_checks(env, tmp_path, "--only", "besteffort,memory", *FAST)
    assert report["environment"]["gpus"][0]["compute_mode"] == "exclusive_process"
    assert report["checks"]["besteffort"]["status"] == "skipped" and "EXCLUSIVE_PROCESS" in report["checks"]["besteffort"]["reason"]
    memory = report["checks"]["memory"]
    assert memory["agent_kill"]["compliant_neighbour"] == "not run (exclusive-process GPU)", log
    assert memory["agent_kill"]["hog_exit_code"] == -signal.SIGKILL


def test_checks_that_no_longer_fit_the_budget_are_skipped_with_the_reason(tmp_path: Path, fake_gpu_env: dict[str, str]) -> None:
    code, report, _ = run_checks(fake_gpu_env, tmp_path, "--budget-seconds", "5", *FAST)
    assert code == 2
    assert all(c["status"] == "skipped" and c["reason"].startswith("time budget") for c in report["checks"].values())


def test_a_time_limit_mid_check_keeps_the_report_and_kills_the_workers(tmp_path: Path, fake_gpu_env: dict[str, str]) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--only", "besteffort,burst", "--seconds", "30", "--output", str(out)],
                            env=fake_gpu_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = Path(fake_gpu_env["FAKEGPU_STATE"])
    deadline = time.monotonic() + 60
    while len(live_fake_gpu_processes(state)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)  # what `timeout` in run-on-gpu.sh sends
    stdout, _ = proc.communicate(timeout=60)
    report = json.loads(out.read_text())
    assert proc.returncode == 1
    assert report["checks"]["besteffort"]["status"] == "error" and "interrupted" in report["checks"]["besteffort"]["error"]
    assert report["checks"]["burst"]["status"] == "skipped" and "interrupted" in report["checks"]["burst"]["reason"]
    assert any("killed worker" in line for line in report["checks"]["besteffort"]["cleanup"])
    assert live_fake_gpu_processes(state) == []
    assert "== GPU checks summary (exit 1) ==" in stdout


def test_the_script_imports_on_the_oldest_python_it_supports(tmp_path: Path) -> None:
    """The GPU machine's Python may be older than ours: everything the script imports (its
    modules, the agent loop and what it pulls in) must import on Python 3.9, when one is here."""
    candidates = [shutil.which("python3.9"), *map(str, sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python")))]
    py39 = next((c for c in candidates if c and subprocess.run([c, "-V"], capture_output=True, check=False).returncode == 0), None)
    if py39 is None:
        pytest.skip("no Python 3.9 here")
    wheels = [str(p) for p in (CHECKS_DIR / "wheels").glob("*.whl")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHECKS_DIR), str(REPO), str(REPO / "node-agent"), *wheels])}
    modules = "gpucheck.cli, gpucheck.checks_agent, gpucheck.checks_dra, gpucheck.checks_mps, gpucheck.worker_main, tessera_node.agent.loop, tessera_node.gpu.nvml"
    done = subprocess.run([py39, "-B", "-c", f"import {modules}; import pynvml, prometheus_client"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
