"""CUDA worker processes and their cleanup: nothing the checks start may outlive them.

Three layers: each worker asks the kernel to kill it when the orchestrator dies
(PR_SET_PDEATHSIG, set in worker_main.py); `cleanup()` kills every live worker and stops every
MPS supervisor (run from `finally`, atexit and the SIGTERM handler); run-on-gpu.sh finally sends
`quit` to any MPS control daemon left under the checks' own pipe directories.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

WORKER_PATH = Path(__file__).with_name("worker_main.py")
MPS_ENV_KEYS = (
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_LOG_DIRECTORY",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
)


class WorkerFailed(RuntimeError):
    """A worker did not start or did not report; the message carries its exit code and stderr."""


class CheckFailed(RuntimeError):
    """A check could not complete; `details` go into its report entry (logs, what was seen)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class Stoppable(Protocol):
    def stop_all(self) -> None: ...


_LIVE: set[Worker] = set()
_SUPERVISORS: list[Stoppable] = []
_EXTRA_PIDS: set[int] = set()  # processes our daemons spawned (MPS servers), killed if left over
_BEFORE_KILL: list[Callable[[], None]] = []  # thaw frozen cgroups first: a v1-frozen task ignores SIGKILL


def worker_env(gpu_uuid: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: ours, pinned to one GPU, with no MPS variable unless given (an
    inherited CUDA_MPS_PIPE_DIRECTORY would silently turn a 'native' run into an MPS client)."""
    env = {k: v for k, v in os.environ.items() if k not in MPS_ENV_KEYS}
    env["CUDA_VISIBLE_DEVICES"] = gpu_uuid
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class Worker:
    def __init__(self, name: str, spec: Mapping[str, Any], env: Mapping[str, str], logdir: Path) -> None:
        self.name = name
        self.spec = {**spec, "parent": os.getpid()}
        logdir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = logdir / f"{name}.stderr"
        self._err: IO[str] = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER_PATH), json.dumps(self.spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True, env=dict(env), close_fds=True,
        )
        _LIVE.add(self)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, name=f"read-{name}", daemon=True).start()
        self.ready: dict[str, Any] = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _next_json(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerFailed(f"worker {self.name}: no answer within {timeout:.0f} s; {self._state()}")
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait(timeout=10)
                raise WorkerFailed(f"worker {self.name} ended without answering; {self._state()}")
            try:
                value = json.loads(line)
            except ValueError:
                continue  # a library printed something on stdout
            if isinstance(value, dict):
                return value

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        self.ready = self._next_json(timeout)
        if "ready" not in self.ready:
            raise WorkerFailed(f"worker {self.name}: expected ready, got {str(self.ready)[:200]}")
        return self.ready

    def go(self, start: float, end: float) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"start": start, "end": end}) + "\n")
        self.proc.stdin.flush()

    def result(self, timeout: float) -> dict[str, Any]:
        out = self._next_json(timeout)
        self.proc.wait(timeout=30)
        self.close()
        return out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process dies as well, but be plain
            except ProcessLookupError:
                pass
            self.proc.kill()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        self.close()

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self._err.close()
        _LIVE.discard(self)

    def stderr_tail(self, chars: int = 1500) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _state(self) -> str:
        code = self.proc.poll()
        where = "still running" if code is None else f"exit code {code}"
        tail = self.stderr_tail(800).strip()
        return f"{where}; stderr: {tail or '(empty)'}"


STARTS: list[float] = []  # seconds from spawn to ready, per start_all: budgets the next checks


def start_all(workers: Sequence[Worker], timeout: float) -> None:
    """Wait until every worker is ready (they start in parallel)."""
    began = time.monotonic()
    deadline = began + timeout
    for w in workers:
        w.wait_ready(max(1.0, deadline - time.monotonic()))
    STARTS.append(time.monotonic() - began)


def go_together(workers: Sequence[Worker], seconds: float, lead: float = 0.5) -> tuple[float, float]:
    """Start every worker at the same monotonic instant; returns (start, end)."""
    start = time.monotonic() + lead
    end = start + seconds
    for w in workers:
        w.go(start, end)
    return start, end


def results(workers: Sequence[Worker], end: float, grace: float = 60.0) -> dict[str, dict[str, Any]]:
    out = {}
    for w in workers:
        out[w.name] = w.result(max(5.0, end - time.monotonic() + grace))
    return out


def register_supervisor(supervisor: Stoppable) -> None:
    _SUPERVISORS.append(supervisor)


def unregister_supervisor(supervisor: Stoppable) -> None:
    if supervisor in _SUPERVISORS:
        _SUPERVISORS.remove(supervisor)


def before_kill(hook: Callable[[], None]) -> None:
    if hook not in _BEFORE_KILL:
        _BEFORE_KILL.append(hook)


def drop_before_kill(hook: Callable[[], None]) -> None:
    if hook in _BEFORE_KILL:
        _BEFORE_KILL.remove(hook)


def remember_pid(pid: int) -> None:
    _EXTRA_PIDS.add(pid)


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state first, utime 12th, stime
    13th); the name in parentheses may hold spaces, so the line is split after its last `)`.
    Raises OSError (FileNotFoundError, ProcessLookupError) when the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()


def is_gone(pid: int) -> bool:
    """True when the process is gone or a zombie (reaped here when it is our child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return True
    except ChildProcessError:
        pass
    try:
        state = stat_fields(pid)[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    """Wait until the processes are gone; returns those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if not is_gone(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if not is_gone(p)]
    return left


def _is_mps_process(pid: int) -> bool:
    try:
        return b"nvidia-cuda-mps" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def cleanup() -> list[str]:
    """Kill every worker, stop every MPS daemon, kill leftover MPS servers; returns what it did."""
    done: list[str] = []
    for hook in list(_BEFORE_KILL):
        try:
            hook()
        except OSError as exc:
            done.append(f"thawing before kill failed: {exc}")
    for w in list(_LIVE):
        if w.alive():
            done.append(f"killed worker {w.name} (pid {w.pid})")
        w.kill()
    for supervisor in list(_SUPERVISORS):
        try:
            supervisor.stop_all()
            done.append("stopped MPS daemons")
        except Exception as exc:  # noqa: BLE001 - cleanup goes on
            done.append(f"stopping MPS daemons failed: {exc}")
        unregister_supervisor(supervisor)
    for pid in wait_gone(sorted(_EXTRA_PIDS), 5.0):
        if not _is_mps_process(pid):  # a PID reported from another namespace may be someone else here
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            done.append(f"killed leftover MPS server pid {pid}")
        except (ProcessLookupError, PermissionError):
            pass
    _EXTRA_PIDS.clear()
    return done
