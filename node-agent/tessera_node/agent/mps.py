"""Supervise one CUDA MPS control daemon per GPU of a fixed-share pool.

Each GPU gets its own daemon, started in the foreground (`nvidia-cuda-mps-control -f`, so the
agent owns the process and sees it exit) with `CUDA_VISIBLE_DEVICES=<gpu uuid>` and its own
`CUDA_MPS_PIPE_DIRECTORY` / `CUDA_MPS_LOG_DIRECTORY` under `/run/tessera/mps/<uuid>/`. A daemon
that exits is restarted on the next supervision pass.

Limits, two layers (MPS semantics: a client's env can only LOWER what the daemon allows):
- per container, through its env (written into the allocation ConfigMap at bind):
  `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<gpu-core rounded to the nearest whole TPCs>`
  (`tessera.model.contract.mps_thread_percentage`) and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<mib>M`;
- per GPU, daemon defaults (`set_default_active_thread_percentage`,
  `set_default_device_pinned_mem_limit 0 <mib>M`) = the largest share on that GPU, so a client that
  drops its env still cannot exceed the largest share granted there (MPS cannot do better: the
  default applies to every client of the daemon, and it only takes effect for the next MPS server
  the daemon spawns).

Everything goes through the `ProcessRunner` seam; `FakeProcessRunner` drives the tests.
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tessera.model.contract import GpuShare, mps_thread_percentage
from tessera_node.registry import RegisteredContainer

MPS_CONTROL = "nvidia-cuda-mps-control"


@dataclass(frozen=True)
class MpsLimits:
    active_thread_pct: int
    pinned_mem_mib: int | None  # None: no memory limit was asked on this GPU


@dataclass(frozen=True)
class MpsDirs:
    pipe: Path
    log: Path


def mps_dirs(root: Path, gpu_uuid: str) -> MpsDirs:
    return MpsDirs(root / gpu_uuid / "pipe", root / gpu_uuid / "log")


def client_env(root: Path, share: GpuShare, sm_count: int | None = None) -> dict[str, str]:
    """The env a fixed-share container needs to use its GPU's daemon with its own limits (the
    extender writes the same percentage into the allocation ConfigMap)."""
    dirs = mps_dirs(root, share.uuid)
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": str(dirs.pipe),
        "CUDA_MPS_LOG_DIRECTORY": str(dirs.log),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(mps_thread_percentage(share.core, sm_count)),
    }
    if share.memory_mib > 0:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={share.memory_mib}M"
    return env


def desired_limits(containers: Iterable[RegisteredContainer], sm_counts: Mapping[str, int | None] | None = None) -> dict[str, MpsLimits]:
    """GPU uuid -> daemon defaults, for every GPU holding a fixed-share container; the thread
    percentage is the largest share's `mps_thread_percentage` on that GPU's SMs (`sm_counts`: uuid
    -> SMs; unknown: the share's percent)."""
    cores: dict[str, int] = {}
    memory: dict[str, int | None] = {}
    for c in containers:
        if not c.policy.uses_mps:
            continue
        for share in c.shares:
            if share.core >= 100:
                # A whole GPU is exclusive: no daemon, so its CUDA clients find no MPS pipe and
                # run directly on the GPU (also what a multi-GPU container needs: one MPS daemon
                # per GPU could not serve its other GPUs).
                continue
            cores[share.uuid] = max(cores.get(share.uuid, 0), min(100, share.core))
            previous = memory.get(share.uuid, 0)
            if share.memory_mib <= 0 or previous is None:
                memory[share.uuid] = None
            else:
                memory[share.uuid] = max(previous, share.memory_mib)
    sms = sm_counts or {}
    return {uuid: MpsLimits(mps_thread_percentage(cores[uuid], sms.get(uuid)), memory[uuid]) for uuid in cores}


def control_commands(limits: MpsLimits) -> str:
    lines = [f"set_default_active_thread_percentage {limits.active_thread_pct}"]
    if limits.pinned_mem_mib is not None:
        lines.append(f"set_default_device_pinned_mem_limit 0 {limits.pinned_mem_mib}M")
    return "\n".join(lines) + "\n"


class ProcessHandle(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...


class ProcessRunner(Protocol):
    def start(self, argv: list[str], env: Mapping[str, str]) -> ProcessHandle: ...

    def run(self, argv: list[str], env: Mapping[str, str], stdin: str, timeout_s: float) -> tuple[int, str]: ...


class SubprocessRunner:
    """Real processes. Daemons inherit the agent's environment plus the MPS variables."""

    def start(self, argv: list[str], env: Mapping[str, str]) -> ProcessHandle:
        return subprocess.Popen(argv, env={**os.environ, **env}, stdin=subprocess.DEVNULL)

    def run(self, argv: list[str], env: Mapping[str, str], stdin: str, timeout_s: float) -> tuple[int, str]:
        done = subprocess.run(
            argv, env={**os.environ, **env}, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        return done.returncode, done.stdout + done.stderr


@dataclass
class FakeProcess:
    pid: int
    argv: list[str]
    env: dict[str, str]
    exit_code: int | None = None

    def poll(self) -> int | None:
        return self.exit_code

    def terminate(self) -> None:
        if self.exit_code is None:
            self.exit_code = -15


@dataclass
class FakeProcessRunner:
    """Records daemons and control commands; `crash(uuid)` makes a daemon exit."""

    started: list[FakeProcess] = field(default_factory=list)
    commands: list[tuple[dict[str, str], str]] = field(default_factory=list)
    next_pid: int = 40000

    def start(self, argv: list[str], env: Mapping[str, str]) -> ProcessHandle:
        self.next_pid += 1
        proc = FakeProcess(self.next_pid, list(argv), dict(env))
        self.started.append(proc)
        return proc

    def run(self, argv: list[str], env: Mapping[str, str], stdin: str, timeout_s: float) -> tuple[int, str]:
        self.commands.append((dict(env), stdin))
        return 0, ""

    def running(self) -> dict[str, FakeProcess]:
        return {p.env["CUDA_VISIBLE_DEVICES"]: p for p in self.started if p.exit_code is None}

    def crash(self, gpu_uuid: str) -> None:
        self.running()[gpu_uuid].exit_code = 1


@dataclass
class _Daemon:
    handle: ProcessHandle
    limits: MpsLimits | None = None  # last limits sent successfully


@dataclass
class MpsSupervisor:
    runner: ProcessRunner
    root: Path
    control_binary: str = MPS_CONTROL
    command_timeout_s: float = 5.0
    restarts: dict[str, int] = field(default_factory=dict)
    _daemons: dict[str, _Daemon] = field(default_factory=dict)

    def env_for(self, gpu_uuid: str) -> dict[str, str]:
        dirs = mps_dirs(self.root, gpu_uuid)
        return {
            "CUDA_VISIBLE_DEVICES": gpu_uuid,
            "CUDA_MPS_PIPE_DIRECTORY": str(dirs.pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(dirs.log),
        }

    def reconcile(self, desired: Mapping[str, MpsLimits]) -> list[str]:
        """Start, restart, re-limit or stop daemons; returns what it did, for the log."""
        done: list[str] = []
        for uuid in [u for u in self._daemons if u not in desired]:
            self._stop(uuid)
            done.append(f"stopped MPS daemon for {uuid}: no fixed-share container left")
        for uuid, limits in sorted(desired.items()):
            daemon = self._daemons.get(uuid)
            if daemon is not None and daemon.handle.poll() is not None:
                self.restarts[uuid] = self.restarts.get(uuid, 0) + 1
                done.append(f"MPS daemon for {uuid} exited with {daemon.handle.poll()}; restarting")
                daemon = None
            if daemon is None:
                dirs = mps_dirs(self.root, uuid)
                dirs.pipe.mkdir(parents=True, exist_ok=True)
                dirs.log.mkdir(parents=True, exist_ok=True)
                try:
                    handle = self.runner.start([self.control_binary, "-f"], self.env_for(uuid))
                except OSError as exc:
                    done.append(f"cannot start {self.control_binary} for {uuid}: {exc}; is the NVIDIA driver's MPS binary on PATH?")
                    continue
                daemon = _Daemon(handle)
                self._daemons[uuid] = daemon
                done.append(f"started MPS daemon for {uuid} (pid {handle.pid})")
            if daemon.limits != limits:
                code, out = self._control(uuid, control_commands(limits))
                if code == 0:
                    daemon.limits = limits
                    done.append(f"MPS defaults for {uuid}: {limits.active_thread_pct}% threads, pinned memory {limits.pinned_mem_mib} MiB")
                else:
                    done.append(f"MPS control for {uuid} failed ({code}): {out.strip()}")
        return done

    def limits_applied(self, gpu_uuid: str) -> bool:
        """Whether the GPU's daemon runs and accepted its limits."""
        daemon = self._daemons.get(gpu_uuid)
        return daemon is not None and daemon.limits is not None and daemon.handle.poll() is None

    def running(self) -> dict[str, int]:
        return {u: d.handle.pid for u, d in self._daemons.items() if d.handle.poll() is None}

    def stop_all(self) -> None:
        for uuid in list(self._daemons):
            self._stop(uuid)

    def _stop(self, uuid: str) -> None:
        daemon = self._daemons.pop(uuid)
        if daemon.handle.poll() is None:
            self._control(uuid, "quit\n")
            daemon.handle.terminate()

    def _control(self, uuid: str, commands: str) -> tuple[int, str]:
        try:
            return self.runner.run([self.control_binary], self.env_for(uuid), commands, self.command_timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 1, str(exc)
