"""Checks through CUDA MPS, driven by the agent's own `MpsSupervisor`, `desired_limits` and
`client_env` (the env the webhook gives fixed-share containers).

Every MPS run proves the clients really reached the MPS server (`get_server_list` /
`get_client_list`): a client that cannot reach its daemon silently runs natively, which would
make a ratio look like time-slicing instead of failing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpucheck.analysis import (
    ERROR,
    FAILED,
    MPS_RATIO,
    OK,
    OVERHEAD_PCT,
    check_result,
    overhead_pct,
    parse_pids,
    ratio,
    steady_rate,
)
from gpucheck.procs import CheckFailed, Worker, WorkerFailed, go_together, register_supervisor, remember_pid, results, start_all, unregister_supervisor, wait_gone, worker_env
from gpucheck.world import Context, new_pod_uid
from tessera.model.contract import GpuShare
from tessera_node.agent.mps import MpsLimits, MpsSupervisor, SubprocessRunner, client_env, desired_limits, mps_dirs
from tessera_node.registry import ContainerName, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy

WARMUP_S = 1.0  # measured windows start this long after the common start


class MpsSession:
    """One supervisor (one daemon per GPU in `limits`), under a short /tmp root: the MPS pipe
    directory holds unix sockets, whose paths must stay under 108 bytes."""

    def __init__(self, ctx: Context, limits: Mapping[str, MpsLimits], start_timeout_s: float = 20.0) -> None:
        self.ctx = ctx
        self.root = Path(tempfile.mkdtemp(prefix=f"tmps-{os.getpid()}-", dir="/tmp"))  # run-on-gpu.sh reads the pid
        self.supervisor = MpsSupervisor(SubprocessRunner(), self.root)
        self.limits = dict(limits)
        self.log: list[str] = []
        self.servers: set[int] = set()
        self.final_logs: dict[str, dict[str, str]] = {}
        register_supervisor(self.supervisor)
        deadline = time.monotonic() + start_timeout_s
        while True:  # the daemon creates its pipe shortly after start; limits are re-sent until accepted
            self.log += self.supervisor.reconcile(self.limits)
            if all(self.supervisor.limits_applied(u) for u in self.limits):
                return
            if time.monotonic() > deadline:
                failure = self.failure(f"the MPS control daemon did not accept its limits within {start_timeout_s:.0f} s")
                self.stop()
                raise failure
            time.sleep(0.25)

    def control(self, gpu_uuid: str, command: str) -> tuple[int, str]:
        """One command to the GPU's control daemon (the same pipe directory as its clients)."""
        env = {**worker_env(gpu_uuid), **self.supervisor.env_for(gpu_uuid)}
        try:
            done = subprocess.run([self.supervisor.control_binary], env=env, input=command + "\n", capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 1, str(exc)
        return done.returncode, (done.stdout + done.stderr).strip()

    def clients(self, gpu_uuid: str) -> dict[str, Any]:
        """Servers and connected clients as the control daemon reports them."""
        code, out = self.control(gpu_uuid, "get_server_list")
        servers = parse_pids(out) if code == 0 else []
        self.servers.update(servers)
        for pid in servers:
            remember_pid(pid)
        clients: list[int] = []
        for pid in servers:
            code, text = self.control(gpu_uuid, f"get_client_list {pid}")
            if code == 0:
                clients += parse_pids(text)
        return {"servers": servers, "clients": clients, "raw": out[:200]}

    def failure(self, what: object) -> CheckFailed:
        """The error to raise, with the daemon's logs while they still exist."""
        return CheckFailed(str(what), mps_logs={u: self.log_tail(u) for u in self.limits}, mps_supervisor_log=self.log[-10:])

    def log_tail(self, gpu_uuid: str, chars: int = 1200) -> dict[str, str]:
        out = {}
        log_dir = mps_dirs(self.root, gpu_uuid).log
        for name in ("control.log", "server.log"):
            try:
                out[name] = (log_dir / name).read_text(errors="replace")[-chars:]
            except OSError:
                continue
        return out

    def stop(self) -> dict[str, Any]:
        daemons = list(self.supervisor.running().values())
        self.final_logs = {u: self.log_tail(u) for u in self.limits}
        self.supervisor.stop_all()
        unregister_supervisor(self.supervisor)
        left = wait_gone(daemons + sorted(self.servers), 10.0)
        if self.ctx.artifacts is not None:
            dest = self.ctx.artifacts / "mps-logs" / self.root.name
            for uuid in self.limits:
                src = mps_dirs(self.root, uuid).log
                if src.is_dir():
                    shutil.copytree(src, dest / uuid, dirs_exist_ok=True)
        shutil.rmtree(self.root, ignore_errors=True)
        return {"daemons": daemons, "servers": sorted(self.servers), "still_running_after_stop": left}


def fixed_share_record(gpu_uuid: str, core: int, memory_mib: int = 0, name: str = "main") -> RegisteredContainer:
    return RegisteredContainer(PodUid(new_pod_uid()), "gpu-checks", f"fixed-{core}", ContainerName(name),
                               (GpuShare(0, gpu_uuid, core, memory_mib),), None, PoolPolicy(sharing="fixed-share"))


def mps_worker(ctx: Context, name: str, env: Mapping[str, str], **spec: Any) -> Worker:
    return Worker(name, spec, worker_env(ctx.gpu.uuid, env), ctx.workdir / "workers")


def native_worker(ctx: Context, name: str, **spec: Any) -> Worker:
    return Worker(name, spec, worker_env(ctx.gpu.uuid, {"CUDA_MPS_PIPE_DIRECTORY": str(ctx.native_pipe)}), ctx.workdir / "workers")


def solo_rate(ctx: Context, worker: Worker, seconds: float, on_ready: Any = None) -> tuple[float | None, Any]:
    """Run one ready-able worker alone for `seconds`; its steady matmuls/s (after warm-up)."""
    start_all([worker], ctx.ready_timeout_s)
    seen = on_ready() if on_ready is not None else None
    start, end = go_together([worker], seconds)
    out = results([worker], end)[worker.name]
    return steady_rate(out["batches"], start + WARMUP_S, end, out["per_batch"]), seen


def check_mps(ctx: Context) -> dict[str, Any]:
    """Two fixed-share clients at 60 % and 30 % on one GPU at once; their throughput ratio."""
    uuid = ctx.gpu.uuid
    records = [fixed_share_record(uuid, 60), fixed_share_record(uuid, 30)]
    # the SMs the NVML backend reports: the extender and the agent round the MPS percentage with them
    sm_count = next((g.sm_count for g in ctx.backend().list_gpus() if g.uuid == uuid), None)
    limits = desired_limits(records, {uuid: sm_count})  # the agent's daemon defaults: the largest share on the GPU
    session = MpsSession(ctx, limits)
    envs = {r.shares[0].core: client_env(session.root, r.shares[0], sm_count) for r in records}
    try:
        workers = [mps_worker(ctx, f"mps-{core}", env) for core, env in envs.items()]
        start_all(workers, ctx.ready_timeout_s)
        seen = session.clients(uuid)
        start, end = go_together(workers, ctx.seconds)
        res = results(workers, end)
    except WorkerFailed as exc:
        raise session.failure(exc) from exc
    finally:
        stopped = session.stop()
    rates = {name: steady_rate(r["batches"], start + WARMUP_S, end, r["per_batch"]) for name, r in res.items()}
    figures: dict[str, Any] = {
        "sm_count": sm_count,
        "daemon_defaults": {u: {"active_thread_pct": lim.active_thread_pct, "pinned_mem_mib": lim.pinned_mem_mib} for u, lim in limits.items()},
        "client_env": {f"{core}%": {k: v for k, v in env.items() if k.startswith("CUDA_MPS_ACTIVE")} for core, env in envs.items()},
        "matmuls_per_s": {k: _round(v) for k, v in rates.items()},
        "window_s": round(end - start - WARMUP_S, 2), "mps": seen, "stop": stopped,
    }
    if ctx.reference_rate:
        figures["fraction_of_native"] = {k: _round(ratio(v, ctx.reference_rate)) for k, v in rates.items()}
    if len(seen["clients"]) < 2:
        return check_result(ERROR, error="the clients did not show up on the MPS server (they ran natively?)",
                            mps_logs=session.final_logs.get(uuid), **figures)
    return check_result(OK, MPS_RATIO, ratio(rates["mps-60"], rates["mps-30"]), **figures)


def check_overhead(ctx: Context) -> dict[str, Any]:
    """S6: the same worker alone natively and alone as an MPS client at 100 %, in the order
    native, MPS, MPS, native (cancels a linear drift of clocks or temperature)."""
    uuid = ctx.gpu.uuid
    share = GpuShare(0, uuid, 100, 0)
    runs: list[dict[str, Any]] = []
    rate, _ = solo_rate(ctx, native_worker(ctx, "native-1"), ctx.seconds)
    runs.append({"path": "native", "matmuls_per_s": rate})
    session = MpsSession(ctx, {uuid: MpsLimits(100, None)})  # an explicit daemon: the agent runs none for a whole GPU
    try:
        for i in (1, 2):
            w = mps_worker(ctx, f"mps100-{i}", client_env(session.root, share))
            rate, seen = solo_rate(ctx, w, ctx.seconds, on_ready=lambda: session.clients(uuid))
            runs.append({"path": "mps-100%", "matmuls_per_s": rate, "mps_clients": len(seen["clients"])})
    except WorkerFailed as exc:
        raise session.failure(exc) from exc
    finally:
        stopped = session.stop()
    rate, _ = solo_rate(ctx, native_worker(ctx, "native-2"), ctx.seconds)
    runs.append({"path": "native", "matmuls_per_s": rate})
    native = _mean([r["matmuls_per_s"] for r in runs if r["path"] == "native"])
    shared = _mean([r["matmuls_per_s"] for r in runs if r["path"] != "native"])
    if native is not None:
        ctx.reference_rate, ctx.reference_from = native, "overhead: native runs"
    for r in runs:
        r["matmuls_per_s"] = _round(r["matmuls_per_s"])
    figures: dict[str, Any] = {"runs": runs, "native_matmuls_per_s": _round(native), "mps_matmuls_per_s": _round(shared),
               "window_s_each": round(ctx.seconds - WARMUP_S, 2), "stop": stopped,
               "note": "no agent daemon exists for gpu-core 100 (whole GPUs run natively); this prices the MPS path every fractional fixed-share container takes"}
    if any(r.get("mps_clients", 1) < 1 for r in runs):
        return check_result(ERROR, error="an MPS run did not connect to the MPS server", mps_logs=session.final_logs.get(uuid), **figures)
    return check_result(OK, OVERHEAD_PCT, overhead_pct(native, shared), **figures)


def mps_memory_limits(ctx: Context) -> dict[str, Any]:
    """Pinned device memory limits through MPS, both layers: the client env
    (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from `client_env`) and the daemon default
    (`set_default_device_pinned_mem_limit` = the largest share) for a client that dropped its env."""
    uuid = ctx.gpu.uuid
    small, large = fixed_share_record(uuid, 50, 2048), fixed_share_record(uuid, 30, 3072)
    limits = desired_limits([small, large])
    session = MpsSession(ctx, limits)
    env_small = client_env(session.root, small.shares[0])
    env_dropped = {k: v for k, v in client_env(session.root, large.shares[0]).items() if k != "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"}
    ask = 6144
    try:
        probes = [mps_worker(ctx, "mps-mem-env", env_small, probe_mib=ask, chunk_mib=128),
                  mps_worker(ctx, "mps-mem-no-env", env_dropped, probe_mib=ask, chunk_mib=128)]
        out = {w.name: w.result(ctx.ready_timeout_s)["probe"] for w in probes}
    except WorkerFailed as exc:
        raise session.failure(exc) from exc
    finally:
        stopped = session.stop()
    cases = {"mps-mem-env": (2048, env_small.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")),
             "mps-mem-no-env": (3072, "unset: daemon default set_default_device_pinned_mem_limit 0 3072M")}
    verdicts: dict[str, Any] = {}
    for name, (limit, how) in cases.items():
        got = out[name]
        capped = got["out_of_memory"] and got["allocated_mib"] <= limit and got["allocated_mib"] >= limit // 2
        verdicts[name] = {"limit_mib": limit, "limit_from": how, "capped": capped, **got}
    status = OK if all(v["capped"] for v in verdicts.values()) else FAILED
    return {"status": status, "daemon_defaults": {u: {"pinned_mem_mib": lim.pinned_mem_mib} for u, lim in limits.items()},
            "clients": verdicts, "stop": stopped,
            "pass_when": "allocation fails with out-of-memory at or below the limit (and not below half of it)"}


def _mean(values: list[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return sum(seen) / len(seen) if seen else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
