"""GPU checks for the node agent: run on a machine with an NVIDIA GPU, its driver and PyTorch.

    python node-agent/gpu-checks/run_gpu_checks.py [--seconds 10] [--only nvml,mps,memory,colocation]

Prints one JSON document with a figure per check. Where something is missing (no GPU, no
driver, no PyTorch, no MPS binary, no writable cgroup) the check reports `"status": "skipped"`
with the reason, and the script exits 2 if nothing could run at all.

Checks:
- nvml: the NVML backend lists the GPUs and sees a PyTorch process with its memory and SM use.
- mps: one MPS control daemon (started by the agent's MpsSupervisor), two clients at 60 % and
  30 % active threads running the same matmul loop at once; target throughput ratio 2.0 +- 0.2.
- memory: a process allocating past its gpu-memory is found through NVML and killed by the
  agent's MemoryGuard (enforce); reports the time from over-limit to dead.
- colocation: an online job in bursts next to an offline job; the agent's controller pauses the
  offline one (cgroup v2 freezer when /sys/fs/cgroup is writable, otherwise SIGSTOP/SIGCONT,
  said in the output); target: online keeps >= 95 % of its exclusive throughput.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORKER = textwrap.dedent(
    """
    import os, sys, time, torch
    seconds, size, alloc_mib, burst = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dev = torch.device("cuda")
    a = torch.randn(size, size, device=dev); b = torch.randn(size, size, device=dev)
    hold = torch.empty(alloc_mib * 1024 * 1024, dtype=torch.uint8, device=dev) if alloc_mib else None
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    end = time.time() + seconds; done = 0; busy = 0.0
    on, off = (float(x) for x in burst.split(":")) if burst != "-" else (seconds, 0.0)
    while time.time() < end:
        start = time.time()
        while time.time() - start < on and time.time() < end:
            for _ in range(8):
                a @ b
            torch.cuda.synchronize(); done += 8
        busy += time.time() - start
        if off:
            time.sleep(off)
    print(f"{done} {busy}", flush=True)
    """
)


def _env_ok() -> str | None:
    try:
        import torch  # noqa: F401
    except ImportError:
        return "PyTorch is not installed (pip install torch)"
    import torch as _torch

    if not _torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU (no NVIDIA GPU or driver on this machine)"
    return None


class Worker:
    def __init__(self, seconds: float, size: int = 4096, alloc_mib: int = 0, burst: str = "-", env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(seconds), str(size), str(alloc_mib), burst],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"worker failed to start (exit {self.proc.poll()})")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def result(self, timeout: float) -> tuple[int, float]:
        out, _ = self.proc.communicate(timeout=timeout)
        done, busy = out.split()[-2:]
        return int(done), float(busy)


def check_nvml(seconds: float) -> dict[str, Any]:
    from tessera_node.gpu.nvml import NvmlBackend

    backend = NvmlBackend()
    backend.open()
    try:
        gpus = backend.list_gpus()
        worker = Worker(seconds, alloc_mib=1024)
        worker.go()
        time.sleep(min(3.0, seconds / 2))
        mine = [p for p in backend.processes() if p.pid == worker.proc.pid]
        util = backend.utilisation()
        worker.result(seconds + 60)
    finally:
        backend.close()
    return {
        "status": "ok" if mine else "failed",
        "gpus": [{"index": g.index, "uuid": g.uuid, "model": g.model, "memoryMiB": g.memory_mib, "mig": g.mig_mode.value} for g in gpus],
        "worker_seen": bool(mine),
        "worker_memory_mib": mine[0].used_memory_mib if mine else None,
        "worker_sm_pct": mine[0].sm_utilisation_pct if mine else None,
        "gpu_util_pct": [u.gpu_pct for u in util],
    }


def check_mps(seconds: float) -> dict[str, Any]:
    if shutil.which("nvidia-cuda-mps-control") is None:
        return {"status": "skipped", "reason": "nvidia-cuda-mps-control is not on PATH (install the driver's MPS utilities)"}
    from tessera.contract import GpuShare
    from tessera_node.agent.mps import MpsLimits, MpsSupervisor, SubprocessRunner, client_env
    from tessera_node.gpu.nvml import NvmlBackend

    backend = NvmlBackend()
    backend.open()
    uuid = backend.list_gpus()[0].uuid
    backend.close()
    root = Path(tempfile.mkdtemp(prefix="tessera-mps-"))
    mps = MpsSupervisor(SubprocessRunner(), root)
    try:
        for _ in range(20):  # the daemon creates its pipe shortly after start; limits are re-sent until accepted
            mps.reconcile({uuid: MpsLimits(60, None)})
            if mps.limits_applied(uuid):
                break
            time.sleep(0.25)
        workers = {
            pct: Worker(seconds, env={**client_env(root, GpuShare(0, uuid, pct, 0)), "CUDA_VISIBLE_DEVICES": uuid})
            for pct in (60, 30)
        }
        for w in workers.values():
            w.go()
        done = {pct: w.result(seconds + 120)[0] for pct, w in workers.items()}
    finally:
        mps.stop_all()
    ratio = done[60] / max(1, done[30])
    return {"status": "ok", "iterations_60": done[60], "iterations_30": done[30], "ratio": round(ratio, 3),
            "target": "2.0 +- 0.2", "met": abs(ratio - 2.0) <= 0.2}


def check_memory(seconds: float) -> dict[str, Any]:
    from tessera.contract import GpuShare
    from tessera_node.agent.attribution import ContainerGpuUse
    from tessera_node.agent.memory import MemoryGuard, SignalKiller
    from tessera_node.agent.registry import ContainerName, MemoryEnforcement, PodUid, PoolPolicy, RegisteredContainer
    from tessera_node.gpu.nvml import NvmlBackend

    backend = NvmlBackend()
    backend.open()
    gpu = backend.list_gpus()[0]
    limit = 2048
    record = RegisteredContainer(PodUid("gpu-check"), "gpu-checks", "hog", ContainerName("main"), (GpuShare(0, gpu.uuid, 50, limit),),
                                 None, PoolPolicy(memory_enforcement=MemoryEnforcement.ENFORCE))
    worker = Worker(seconds + 30, alloc_mib=limit * 2)
    worker.go()
    guard, killer = MemoryGuard(), SignalKiller()
    started = time.monotonic()
    killed_after = None
    try:
        while time.monotonic() - started < seconds + 30:
            mine = [p for p in backend.processes() if p.pid == worker.proc.pid]
            if not mine:
                time.sleep(0.1)
                continue
            use = ContainerGpuUse(record.key, gpu.uuid, sum(p.used_memory_mib for p in mine), 0, tuple(p.pid for p in mine))
            for violation in guard.check([record], {(record.key, gpu.uuid): use}):
                for pid in violation.pids:
                    killer.kill(pid)
            if worker.proc.poll() is not None:
                killed_after = time.monotonic() - started
                break
            time.sleep(0.1)
    finally:
        if worker.proc.poll() is None:
            worker.proc.kill()
        backend.close()
    return {"status": "ok" if killed_after is not None else "failed", "limit_mib": limit, "allocated_mib": limit * 2,
            "killed": worker.proc.returncode == -signal.SIGKILL, "seconds_to_kill_after_start": killed_after}


def _pauser() -> tuple[str, Callable[[int, bool], None]]:
    """Freeze through a cgroup v2 child group when we may, else stop the process."""
    root = Path("/sys/fs/cgroup")
    group = root / "tessera-gpu-check-offline"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.freeze").write_text("0")

        def by_cgroup(pid: int, frozen: bool) -> None:
            (group / "cgroup.procs").write_text(str(pid))
            (group / "cgroup.freeze").write_text("1" if frozen else "0")

        return "cgroup-v2-freezer", by_cgroup
    except OSError:
        return "SIGSTOP/SIGCONT (no writable cgroup v2 here)", lambda pid, frozen: os.kill(pid, signal.SIGSTOP if frozen else signal.SIGCONT)


def check_colocation(seconds: float) -> dict[str, Any]:
    from tessera.contract import GpuShare
    from tessera_node.agent.colocation import ColocationController
    from tessera_node.agent.registry import AppClass, ContainerName, PodUid, PoolPolicy, RegisteredContainer
    from tessera_node.gpu.nvml import NvmlBackend

    burst = "1.0:0.5"  # online: 1 s of work, 0.5 s idle
    alone = Worker(seconds, burst=burst)
    alone.go()
    exclusive, exclusive_busy = alone.result(seconds + 60)

    backend = NvmlBackend()
    backend.open()
    uuid = backend.list_gpus()[0].uuid
    policy = PoolPolicy(online_offline=True, offline_resume_idle_s=0.3)
    share = (GpuShare(0, uuid, 50, 0),)
    online_rec = RegisteredContainer(PodUid("on"), "c", "online", ContainerName("m"), share, AppClass.ONLINE, policy)
    offline_rec = RegisteredContainer(PodUid("off"), "c", "offline", ContainerName("m"), share, AppClass.OFFLINE, policy)
    how, pause = _pauser()
    offline = Worker(seconds + 10)
    online = Worker(seconds, burst=burst)
    offline.go()
    online.go()
    ctl = ColocationController()
    frozen = False
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # the agent's fast path, with the real NVML backend, at 100 ms
        active = [p for p in backend.processes() if p.pid == online.proc.pid and p.sm_utilisation_pct >= 5]
        ctl.step(time.monotonic(), [online_rec, offline_rec], {uuid: [online_rec.key]} if active else {})
        want = offline_rec.key in ctl.frozen
        if want != frozen:
            pause(offline.proc.pid, want)
            frozen = want
        time.sleep(0.1)
    if frozen:
        pause(offline.proc.pid, False)
    shared, shared_busy = online.result(seconds + 60)
    offline.proc.kill()
    backend.close()
    keep = (shared / max(1e-9, shared_busy)) / (exclusive / max(1e-9, exclusive_busy))
    return {"status": "ok", "pause_method": how, "online_exclusive_it_per_busy_s": round(exclusive / exclusive_busy, 1),
            "online_colocated_it_per_busy_s": round(shared / shared_busy, 1), "kept_fraction": round(keep, 3),
            "target": ">= 0.95", "met": keep >= 0.95}


CHECKS: dict[str, Callable[[float], dict[str, Any]]] = {"nvml": check_nvml, "mps": check_mps, "memory": check_memory, "colocation": check_colocation}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--only", default=",".join(CHECKS))
    args = parser.parse_args()
    missing = _env_ok()
    if missing:
        print(json.dumps({"status": "skipped", "reason": missing + "; run this on a GPU node"}, indent=1))
        return 2
    report: dict[str, Any] = {}
    for name in args.only.split(","):
        try:
            report[name] = CHECKS[name](args.seconds)
        except Exception as exc:  # noqa: BLE001 - one failing check must not hide the others' figures
            report[name] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(report, indent=1))
    return 0 if all(r.get("status") in ("ok", "skipped") for r in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
