"""Checks through the running agent (`tessera_node.agent.loop.Agent`, unchanged) and NVML.

The agent runs its own loop at its production settings (100 ms fast path, 1 s slow path,
activity threshold 5 %, the pool's offlineResumeIdleSeconds default 2 s) in a thread; an observer
thread timestamps every pause decision (the agent's `pauses.paused`) and every freeze the kernel
(or the emulator) confirms (`cgroup.events frozen 1`), every 5 ms.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpucheck.analysis import (
    BESTEFFORT_RATIO,
    BURST_RATIO,
    ERROR,
    FAILED,
    KEPT_FRACTION,
    KILL_SECONDS,
    OK,
    SKIPPED,
    check_result,
    on_windows,
    rate_in_window,
    rate_in_windows,
    ratio,
    reaction,
    steady_rate,
)
from gpucheck.checks_mps import WARMUP_S, mps_memory_limits, native_worker
from gpucheck.procs import Worker, go_together, results, start_all
from gpucheck.world import Context, new_container_id, new_pod_uid
from tessera.model.contract import GpuShare
from tessera_node.agent.freezer import Freezer, FreezeState
from tessera_node.registry import AppClass, ContainerKey, ContainerName, ContainerRegistry, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy
from tessera_node.gpu.backend import GpuIndex


def record(ctx: Context, name: str, core: int, memory_mib: int, policy: PoolPolicy, app: AppClass | None = None) -> RegisteredContainer:
    return RegisteredContainer(PodUid(new_pod_uid()), "gpu-checks", name, ContainerName("main"),
                               (GpuShare(0, ctx.gpu.uuid, core, memory_mib),), app, policy, container_id=new_container_id())


class AgentRun:
    """The production agent over `records`, whose workers are placed in their container cgroups."""

    def __init__(self, ctx: Context, name: str, pairs: Sequence[tuple[RegisteredContainer, Worker]]) -> None:
        from tessera_node.agent.loop import Agent, AgentDeps  # imports prometheus_client (metrics view)
        from tessera_node.agent.memory import SignalKiller
        from tessera_node.agent.settings import AgentSettings

        cgroups = ctx.cgroups()
        state = ctx.workdir / f"agent-{name}"
        registry = ContainerRegistry(state)
        self.dirs: dict[ContainerKey, Path] = {}
        for rec, worker in pairs:
            registry.register(rec)
            assert rec.container_id is not None
            self.dirs[rec.key] = cgroups.add_container(rec.pod_uid, rec.container_id, worker.pid)
        settings = AgentSettings(node_name="gpu-check-node", state_dir=state, cgroup_root=cgroups.locator.root,
                                 proc_root=cgroups.locator.proc_root, mps_enabled=False)
        deps = AgentDeps(backend=ctx.backend(), registry=registry, locator=cgroups.locator, killer=SignalKiller())
        self.agent = Agent(settings, deps)
        self.decided: dict[ContainerKey, list[tuple[float, bool]]] = {k: [] for k in self.dirs}
        self.confirmed: dict[ContainerKey, list[tuple[float, bool]]] = {k: [] for k in self.dirs}
        self.error: str | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.agent.start()
        for target, name in ((self._loop, "agent"), (self._observe, "observer")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _loop(self) -> None:
        try:
            self.agent.run(self._stop)
        except BaseException as exc:  # noqa: BLE001 - reported, the check fails on it
            self.error = f"agent loop died: {type(exc).__name__}: {exc}"

    def _observe(self) -> None:
        freezer = Freezer(self.agent.freezer.version)
        last_d = {k: False for k in self.dirs}
        last_c = {k: False for k in self.dirs}
        while not self._stop.wait(0.005):
            now = time.monotonic()
            paused = self.agent.pauses.paused
            for key, path in self.dirs.items():
                d = key in paused
                if d != last_d[key]:
                    self.decided[key].append((now, d))
                    last_d[key] = d
                c = freezer.state(path) is FreezeState.FROZEN
                if c != last_c[key]:
                    self.confirmed[key].append((now, c))
                    last_c[key] = c

    def stop(self) -> list[str]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        return self.agent.shutdown()


def _prepare(ctx: Context, specs: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[Worker], str]:
    """Start native workers, wait until ready, learn their NVML PIDs."""
    backend = ctx.backend()
    before = backend.raw_pids()
    workers = [native_worker(ctx, name, **spec) for name, spec in specs]
    start_all(workers, ctx.ready_timeout_s)
    return workers, backend.learn(workers, before)


def check_nvml(ctx: Context) -> dict[str, Any]:
    """The NVML backend lists the GPU and sees a PyTorch process: memory, SM use, how soon."""
    backend = ctx.backend()
    gpus = backend.list_gpus()
    (worker,), pid_note = _prepare(ctx, [("nvml", {"hold_mib": 1024})])
    # a lead of 2 s: NVML's utilisation samples of the worker's warm-up have aged out by the start
    start, end = go_together([worker], max(3.0, ctx.seconds / 2), lead=2.0)
    first_active, max_sm, max_mem, calls, spent, spent_cpu = None, 0, 0, 0, 0.0, 0.0
    stamps: set[int] = set()  # the worker's utilisation sample timestamps, collected over the run
    nvml_pid = backend.nvml_pid(worker.pid)
    while time.monotonic() < start:
        time.sleep(0.005)
    while time.monotonic() < end - 0.2:
        t0, c0 = time.perf_counter(), time.thread_time()
        mine = [s for s in backend.processes() if s.pid == worker.pid]
        spent += time.perf_counter() - t0
        spent_cpu += time.thread_time() - c0
        calls += 1
        if mine:
            max_mem = max(max_mem, mine[0].used_memory_mib)
            max_sm = max(max_sm, mine[0].sm_utilisation_pct)
            if first_active is None and mine[0].sm_utilisation_pct >= 5:
                first_active = time.monotonic() - start
        stamps |= _sample_stamps(nvml_pid)
        time.sleep(0.05)
    period_ms = _median_step_ms(stamps)
    per_call = _nvml_call_costs()
    util = backend.utilisation()
    clocks = backend.clocks()
    responsive = backend.is_responsive(GpuIndex(0))
    xids = backend.poll_xid_events(0)
    results([worker], end)
    figures: dict[str, Any] = {
        "gpus": [{"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mib": g.memory_mib, "mig": g.mig_mode.value} for g in gpus],
        "pids": pid_note, "worker_memory_mib_max": max_mem, "worker_sm_pct_max": max_sm,
        "activity_seen_after_ms": None if first_active is None else round(first_active * 1000, 1),
        "process_util_sample_period_ms": period_ms,
        "processes_call_ms_mean": round(spent / max(1, calls) * 1000, 3),
        "processes_call_cpu_ms_mean": round(spent_cpu / max(1, calls) * 1000, 3), "nvml_call_ms": per_call,
        "gpu_util_pct": [u.gpu_pct for u in util],
        "clocks_mhz": [{"sm": c.sm_mhz, "sm_max": c.sm_max_mhz, "mem": c.memory_mhz} for c in clocks],
        "responsive": responsive, "xid_events": len(xids),
    }
    problems = []
    if max_mem < 1024:
        problems.append(f"worker memory seen {max_mem} MiB < the 1024 MiB it holds")
    if first_active is None:
        problems.append("the worker's SM utilisation never reached the agent's 5 % activity threshold")
    if not responsive:
        problems.append("is_responsive(0) is False")
    return check_result(FAILED if problems else OK, problems=problems, **figures)


def _nvml_call_costs(repeat: int = 20) -> dict[str, dict[str, float]] | None:
    """Wall and CPU (this thread's) milliseconds of each NVML call the agent's `processes()` makes,
    so the agent's CPU on a node of many GPUs can be told from its wall time (a diagnostic)."""
    try:
        import pynvml

        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # NVML gone: the figure is a diagnostic only
        return None
    calls = {
        "nvmlDeviceGetProcessUtilization": lambda: pynvml.nvmlDeviceGetProcessUtilization(handle, 0),
        "nvmlDeviceGetComputeRunningProcesses": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
        "nvmlDeviceGetMPSComputeRunningProcesses": lambda: pynvml.nvmlDeviceGetMPSComputeRunningProcesses(handle),
    }
    out: dict[str, dict[str, float]] = {}
    for name, call in calls.items():
        wall = cpu = 0.0
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.thread_time()
            with contextlib.suppress(Exception):  # NOT_FOUND (no sample newer) or NOT_SUPPORTED still cost the call
                call()
            wall += time.perf_counter() - t0
            cpu += time.thread_time() - c0
        out[name] = {"wall_ms": round(wall / repeat * 1000, 3), "cpu_ms": round(cpu / repeat * 1000, 3)}
    return out


def _sample_stamps(nvml_pid: int | None) -> set[int]:
    """Timestamps (us) of the process's utilisation samples NVML buffers now. Collected over a run:
    NVML keeps few per process (on an H100 one at a time), so one read cannot show the period."""
    if nvml_pid is None:
        return set()
    try:
        import pynvml

        samples = pynvml.nvmlDeviceGetProcessUtilization(pynvml.nvmlDeviceGetHandleByIndex(0), 0)
    except Exception:  # NOT_SUPPORTED, NOT_FOUND: the figure is a diagnostic only
        return set()
    return {int(x.timeStamp) for x in samples if int(x.pid) == nvml_pid}


def _median_step_ms(stamps: set[int]) -> float | None:
    """How often the driver samples a process's utilisation (median step between its samples):
    the floor under the agent's online-activity detection latency (200 ms on an H100)."""
    ordered = sorted(stamps)
    steps = sorted(b - a for a, b in zip(ordered, ordered[1:]))
    return round(steps[len(steps) // 2] / 1000.0, 1) if steps else None


def check_besteffort(ctx: Context) -> dict[str, Any]:
    """S3 best-effort: two identical jobs, no limits, the driver time-slices: about equal rates."""
    workers = [native_worker(ctx, "be-a"), native_worker(ctx, "be-b")]
    start_all(workers, ctx.ready_timeout_s)
    start, end = go_together(workers, ctx.seconds)
    res = results(workers, end)
    rates = {k: steady_rate(r["batches"], start + WARMUP_S, end, r["per_batch"]) for k, r in res.items()}
    seen = [v for v in rates.values() if v is not None]
    value = ratio(max(seen), min(seen)) if len(seen) == 2 else None
    figures: dict[str, Any] = {"matmuls_per_s": {k: None if v is None else round(v, 3) for k, v in rates.items()},
                               "window_s": round(end - start - WARMUP_S, 2), "value_is": "faster / slower"}
    if ctx.reference_rate and len(seen) == 2:
        figures["sum_fraction_of_native"] = round(sum(seen) / ctx.reference_rate, 3)
    return check_result(OK, BESTEFFORT_RATIO, value, **figures)


def memory_guard(ctx: Context, name: str, hog_rec: RegisteredContainer, ok_rec: RegisteredContainer, limit: int) -> dict[str, Any]:
    """The agent's memory guard over two registered containers of `limit` MiB: a hog that grows
    past it must be killed within KILL_SECONDS, the compliant neighbour left alone."""
    exclusive = ctx.gpu.compute_mode == "exclusive_process"
    specs = [("mem-hog", {"hold_mib": 512, "grow_mib": 2 * limit})] + ([] if exclusive else [("mem-ok", {"hold_mib": 256})])
    workers, pid_note = _prepare(ctx, specs)
    pairs = list(zip([hog_rec, ok_rec], workers))
    run = AgentRun(ctx, name, pairs)
    run.start()
    try:
        time.sleep(1.5)  # the agent has sampled the workers under their limits at least once
        start, end = go_together(workers, 20.0)
        hog = workers[0]
        while hog.alive() and time.monotonic() < end:
            time.sleep(0.01)
        killed_after = time.monotonic() - start if not hog.alive() else None
        if killed_after is not None:
            time.sleep(1.5)  # one more slow tick: the neighbour must still be alive after it
        survivor_alive = all(w.alive() for w in workers[1:])
    finally:
        thawed = run.stop()
        for w in workers:
            w.kill()
    kills = {str(k[0].container): v for k, v in run.agent.counters.memory_kills.items()}
    agent_part: dict[str, Any] = {
        "limit_mib": limit, "hog_holds_mib": 512 + 2 * limit, "hog_exit_code": workers[0].proc.returncode,
        "seconds_to_kill": None if killed_after is None else round(killed_after, 3), "kills_counted": kills,
        "compliant_neighbour": "not run (exclusive-process GPU)" if exclusive else ("alive" if survivor_alive else "KILLED"),
        "pids": pid_note, "cgroups": ctx.cgroup_note, "agent_error": run.error, "thawed_at_shutdown": thawed,
    }
    out = check_result(OK, KILL_SECONDS, killed_after, agent_kill=agent_part)
    if killed_after is None or (not exclusive and not survivor_alive) or run.error:
        out["status"] = FAILED
    return out


def check_memory(ctx: Context) -> dict[str, Any]:
    """The agent's memory guard (enforce) kills a container over its gpu-memory through NVML, and
    leaves a compliant neighbour alone; then MPS's own pinned memory limit, if MPS is here."""
    limit = 2048
    policy = PoolPolicy(memory_enforcement="enforce")
    out = memory_guard(ctx, "memory", record(ctx, "hog", 50, limit, policy), record(ctx, "compliant", 50, limit, policy), limit)
    if ctx.env.mps_control is None:
        out["mps_pinned_limit"] = {"status": SKIPPED, "reason": "nvidia-cuda-mps-control is not on PATH"}
    else:
        try:
            out["mps_pinned_limit"] = mps_memory_limits(ctx)
        except Exception as exc:  # noqa: BLE001 - the agent half's figures stay
            out["mps_pinned_limit"] = {"status": ERROR, "error": f"{type(exc).__name__}: {exc}", **getattr(exc, "details", {})}
        if out["mps_pinned_limit"]["status"] != OK and out["status"] == OK:
            out["status"] = out["mps_pinned_limit"]["status"]
    return out


def check_colocation(ctx: Context) -> dict[str, Any]:
    """S4: an online job in bursts, alone, then next to a continuous offline job with the agent
    pausing the offline one; kept fraction of the online throughput and the agent's reaction."""
    on, off = ctx.pattern
    duration = ctx.cycles * (on + off)
    alone = native_worker(ctx, "online-alone", pattern=[on, off])
    start_all([alone], ctx.ready_timeout_s)
    s0, e0 = go_together([alone], duration)
    r0 = results([alone], e0)["online-alone"]
    exclusive = rate_in_windows(r0["batches"], on_windows(s0, on, off, e0), r0["per_batch"])
    if ctx.reference_rate is None:
        ctx.reference_rate, ctx.reference_from = exclusive, "colocation: online job alone, during its bursts"

    policy = PoolPolicy(online_offline=True)  # offlineResumeIdleSeconds: the pool default
    online_rec = record(ctx, "online", 50, 0, policy, AppClass.ONLINE)
    offline_rec = record(ctx, "offline", 50, 0, policy, AppClass.OFFLINE)
    workers, pid_note = _prepare(ctx, [("online", {"pattern": [on, off], "hold_mib": 256}), ("offline", {"hold_mib": 512})])
    run = AgentRun(ctx, "colocation", list(zip([online_rec, offline_rec], workers)))
    run.start()
    try:
        # start from a quiet GPU: the online worker's warm-up may still be in NVML's last sample,
        # which pauses the offline one until the resume idle time has passed
        idle_since = time.monotonic()
        give_up = idle_since + policy.offline_resume_idle_s + 5.0
        while time.monotonic() < give_up and (offline_rec.key in run.agent.pauses.paused or time.monotonic() - idle_since < 0.5):
            if offline_rec.key in run.agent.pauses.paused:
                idle_since = time.monotonic()
            time.sleep(0.02)
        start, end = go_together(workers, duration)
        res = results(workers, end)
    finally:
        thawed = run.stop()
    windows = on_windows(start, on, off, end)
    online = res["online"]
    shared = rate_in_windows(online["batches"], windows, online["per_batch"])
    decided, confirmed = run.decided[offline_rec.key], run.confirmed[offline_rec.key]
    freeze = reaction([a for a, _ in windows], decided, True, on)
    frozen = reaction([a for a, _ in windows], confirmed, True, on)
    resume = reaction([b for _, b in windows], decided, False, off)
    lat = [x for x in frozen.latencies if x is not None]
    settle = max(lat) if lat else 0.0
    late = [(a + settle, b) for a, b in windows if b > a + settle + 0.2]
    offline = res["offline"]
    figures: dict[str, Any] = {
        "pattern": {"on_s": on, "off_s": off, "cycles": ctx.cycles, "offline_resume_idle_s": policy.offline_resume_idle_s,
                    "online": "matmul bursts of on_s, idle off_s", "offline": "continuous matmuls",
                    "kept_fraction": "online matmuls/s during its bursts, co-located / alone"},
        "online_alone_matmuls_per_s": round(exclusive, 3), "online_colocated_matmuls_per_s": round(shared, 3),
        "kept_fraction_after_freeze": None if not late else round(rate_in_windows(online["batches"], late, online["per_batch"]) / exclusive, 4),
        "freeze_decided_after_burst_start": freeze.summary(), "freeze_effective_after_burst_start": frozen.summary(),
        "resume_decided_after_burst_end": resume.summary(),
        "offline_share_of_gpu": round(len(offline["batches"]) * offline["per_batch"] / duration / exclusive, 3),
        "warning": None if off > policy.offline_resume_idle_s else
        f"OFF ({off:g} s) <= offlineResumeIdleSeconds ({policy.offline_resume_idle_s:g} s): the offline job never resumes between bursts",
        "pause_method": ctx.cgroup_note, "pids": pid_note, "agent_error": run.error, "thawed_at_shutdown": thawed,
    }
    out = check_result(OK, KEPT_FRACTION, shared / exclusive, **figures)
    if run.error or freeze.summary()["missed"]:
        out["status"] = FAILED
    return out


def check_burst(ctx: Context) -> dict[str, Any]:
    """burst-share: two busy containers of 60 % and 30 % take the GPU in turns (the agent freezes
    the one whose slot it is not); their wall-clock throughput ratio follows core / sum(core)."""
    policy = PoolPolicy(sharing="burst-share")
    recs = [record(ctx, "burst-60", 60, 0, policy), record(ctx, "burst-30", 30, 0, policy)]
    workers, pid_note = _prepare(ctx, [("burst-60", {"hold_mib": 512}), ("burst-30", {"hold_mib": 256})])
    run = AgentRun(ctx, "burst", list(zip(recs, workers)))
    run.start()
    settle = 4.0  # both seen active, slots running
    try:
        time.sleep(0.5)
        start, end = go_together(workers, max(6.0, 2 * ctx.seconds) + settle)
        res = results(workers, end)
    finally:
        thawed = run.stop()
    rates = {k: rate_in_window(r["batches"], start + settle, end, r["per_batch"]) for k, r in res.items()}
    throttles = {str(k.pod_uid): v for k, v in run.agent.burst.throttle_events.items()}
    figures: dict[str, Any] = {
        "matmuls_per_s": {k: round(v, 3) for k, v in rates.items()}, "window_s": round(end - start - settle, 2),
        "throttle_events": sum(throttles.values()),
        "freezes": {name: sum(1 for _, v in run.decided[rec.key] if v) for name, rec in zip(("burst-60", "burst-30"), recs)},
        "period_s": run.agent.burst.period_s, "pause_method": ctx.cgroup_note, "pids": pid_note, "agent_error": run.error,
        "thawed_at_shutdown": thawed,
    }
    if ctx.reference_rate:
        figures["fraction_of_native"] = {k: round(v / ctx.reference_rate, 3) for k, v in rates.items()}
        figures["reference"] = ctx.reference_from
    out = check_result(OK, BURST_RATIO, ratio(rates["burst-60"], rates["burst-30"]), **figures)
    if run.error:
        out["status"] = FAILED
    return out
