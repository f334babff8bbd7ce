"""Workers, cleanup, PID translation and cgroups of the GPU checks, against the fake GPU."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from gpucheck_paths import CHECKS_DIR, FAKEGPU
from gpucheck import procs
from gpucheck.world import EmulatedCgroups, PidMapBackend, kernel_cgroups, new_container_id, new_pod_uid

from tessera_node.agent.freezer import Freezer, FreezeState
from tessera_node.gpu.backend import GpuIndex, Pid, ProcessSample


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_worker_starts_works_in_its_window_and_reports(tmp_path: Path, fake_gpu_env: dict[str, str]) -> None:
    w = procs.Worker("w", {"batch": 4}, {**fake_gpu_env, "CUDA_VISIBLE_DEVICES": "GPU-x"}, tmp_path / "logs")
    try:
        procs.start_all([w], 60)
        assert w.ready["ready"] == w.pid
        start, end = procs.go_together([w], 1.0, lead=0.2)
        out = procs.results([w], end)["w"]
    finally:
        w.kill()
    assert out["per_batch"] == 4 and out["batches"], out
    assert start < out["batches"][0] and out["batches"][-1] <= end + 0.5
    assert not w.alive() and w not in procs._LIVE


def test_a_worker_that_cannot_start_reports_its_stderr(tmp_path: Path, fake_gpu_env: dict[str, str]) -> None:
    env = {**fake_gpu_env, "PYTHONPATH": str(tmp_path)}  # no torch importable at all
    w = procs.Worker("broken", {}, env, tmp_path / "logs")
    with pytest.raises(procs.WorkerFailed, match=r"(?s)ended without answering; exit code 1; stderr: .*No module named 'torch'"):
        w.wait_ready(30)
    w.kill()


def test_cleanup_kills_live_workers_and_runs_hooks_first(tmp_path: Path, fake_gpu_env: dict[str, str]) -> None:
    w = procs.Worker("idle", {}, fake_gpu_env, tmp_path / "logs")
    procs.start_all([w], 60)
    calls: list[bool] = []

    def hook() -> None:
        calls.append(w.alive())

    procs.before_kill(hook)
    try:
        done = procs.cleanup()
    finally:
        procs.drop_before_kill(hook)
    assert calls == [True]  # the hook ran while the worker was still alive
    assert any("killed worker idle" in line for line in done)
    assert not w.alive()


def test_a_worker_dies_with_its_orchestrator_even_when_that_is_killed(tmp_path: Path, fake_gpu_env: dict[str, str]) -> None:
    """PR_SET_PDEATHSIG: a SIGKILLed orchestrator cannot run any cleanup, the kernel does it."""
    pid_file = tmp_path / "worker.pid"
    script = (
        "import sys, time; from pathlib import Path; from gpucheck import procs\n"
        f"w = procs.Worker('orphan', {{}}, dict(__import__('os').environ), Path({str(tmp_path / 'logs')!r}))\n"
        "procs.start_all([w], 60)\n"
        f"Path({str(pid_file)!r}).write_text(str(w.pid))\n"
        "time.sleep(60)\n"
    )
    env = {**fake_gpu_env, "PYTHONPATH": os.pathsep.join([str(CHECKS_DIR), fake_gpu_env["PYTHONPATH"]])}
    orchestrator = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        assert wait_for(pid_file.exists, 60), "the worker never became ready"
        worker = int(pid_file.read_text())
        assert procs.is_gone(worker) is False
        orchestrator.kill()
        orchestrator.wait()
        assert wait_for(lambda: procs.is_gone(worker), 5.0), "the worker outlived its orchestrator"
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()


def test_the_native_env_drops_inherited_mps_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "10")
    env = procs.worker_env("GPU-abc")
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-abc"
    assert procs.worker_env("GPU-abc", {"CUDA_MPS_PIPE_DIRECTORY": "/x"})["CUDA_MPS_PIPE_DIRECTORY"] == "/x"


class ScriptedNvml:
    """A stand-in for NvmlBackend that reports the given (pid, MiB, SM %) processes."""

    def __init__(self) -> None:
        self.procs: list[tuple[int, int, int]] = []

    def processes(self) -> list[ProcessSample]:
        return [ProcessSample(Pid(p), GpuIndex(0), mib, sm) for p, mib, sm in self.procs]


def test_pid_translation_is_learnt_from_new_processes_and_applied() -> None:
    inner = ScriptedNvml()
    inner.procs = [(5000, 900, 0)]  # someone else's process, there before
    backend = PidMapBackend(inner)
    before = backend.raw_pids()
    inner.procs += [(9001, 812, 40), (9000, 556, 0)]
    workers = [SimpleNamespace(pid=10, spec={"hold_mib": 256}), SimpleNamespace(pid=11, spec={"hold_mib": 512})]
    note = backend.learn(workers, before, timeout_s=1.0)
    assert "host PIDs" in note and backend.identity is False
    # translated to our PIDs; the foreign process is dropped rather than guessed
    assert sorted((s.pid, s.sm_utilisation_pct) for s in backend.processes()) == [(10, 0), (11, 40)]
    assert backend.nvml_pid(11) == 9001 and backend.nvml_pid(12) is None


def test_pids_of_the_same_namespace_pass_through() -> None:
    inner = ScriptedNvml()
    backend = PidMapBackend(inner)
    inner.procs = [(10, 556, 0), (4242, 100, 0)]
    assert backend.learn([SimpleNamespace(pid=10, spec={})], set(), timeout_s=1.0) == "same PID namespace as NVML"
    assert [s.pid for s in backend.processes()] == [10, 4242]
    assert backend.nvml_pid(10) == 10


def test_pid_learning_fails_loudly_when_the_worker_never_shows_up() -> None:
    backend = PidMapBackend(ScriptedNvml())
    with pytest.raises(ValueError, match="1 workers started but 0"):
        backend.learn([SimpleNamespace(pid=10, spec={})], set(), timeout_s=0.3)


def test_emulated_cgroups_turn_freeze_writes_into_stop_and_continue(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    cg = EmulatedCgroups(tmp_path / "tree")
    try:
        path = cg.add_container(new_pod_uid(), new_container_id(), sleeper.pid)
        found = cg.locator.process_cgroup(sleeper.pid)
        assert found is not None and cg.locator.container_dir(found.pod_uid, found.container_id) == path
        freezer = Freezer(cg.locator.version)
        assert freezer.freeze_and_wait(path, 2.0) is FreezeState.FROZEN
        assert state_of(sleeper.pid) == "T"
        freezer.request(path, False)
        assert wait_for(lambda: state_of(sleeper.pid) != "T", 2.0)
        assert wait_for(lambda: freezer.state(path) is FreezeState.THAWED, 2.0)
    finally:
        cg.close()
        sleeper.kill()
        sleeper.wait()


def test_kernel_cgroups_when_this_machine_lets_us_freeze(tmp_path: Path) -> None:
    cg, why = kernel_cgroups(tmp_path)
    if cg is None:
        pytest.skip(f"no writable cgroup freezer here: {why}")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = cg.add_container(new_pod_uid(), new_container_id(), sleeper.pid)
        found = cg.locator.process_cgroup(sleeper.pid)  # the real /proc/<pid>/cgroup
        assert found is not None and cg.locator.container_dir(found.pod_uid, found.container_id) == path
        assert Freezer(cg.locator.version).freeze_and_wait(path, 2.0) is FreezeState.FROZEN
        cg.thaw_all()  # a task frozen by the v1 freezer would not die of SIGKILL
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait(timeout=10)
    finally:
        if sleeper.poll() is None:
            cg.thaw_all()
            sleeper.kill()
            sleeper.wait()
        cg.close()
    assert not cg.base.exists()


def test_fake_gpu_is_on_the_path_for_workers() -> None:
    assert (FAKEGPU / "torch" / "__init__.py").exists() and (FAKEGPU / "bin" / "nvidia-cuda-mps-control").exists()
