"""The production agent wired to this machine: real NVML, real processes, real (or emulated) cgroups.

Nothing of the agent's logic is copied here. The checks run `tessera_node.agent.loop.Agent`
unchanged (its own 100 ms loop, attribution, co-location and burst controllers, pause manager,
leases, memory guard, SignalKiller) against:

- `NvmlBackend` behind `PidMapBackend`, which only translates PIDs when NVML reports them from
  another PID namespace (a container without hostPID), as hostPID gives the real agent;
- cgroups: our own subtree tessera-gpu-checks-<pid> of the host's cgroup v2 hierarchy or v1
  freezer hierarchy when it is writable (the kernel freezer does the pausing), else a
  `CgroupTreeBuilder` tree whose `cgroup.freeze` writes an emulator turns into SIGSTOP/SIGCONT
  (the report says which).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpucheck.analysis import match_pids_by_memory
from gpucheck.preflight import Environment, Gpu
from gpucheck.procs import Worker, before_kill, drop_before_kill, stat_fields
from tessera_node.agent.cgroups import CgroupDriver, CgroupLocator, CgroupVersion, detect_version
from tessera_node.agent.fakecgroup import CgroupTreeBuilder
from tessera_node.agent.freezer import Freezer, FreezeState
from tessera_node.gpu.backend import GpuClocks, GpuIndex, GpuInfo, GpuUtilisation, Pid, ProcessSample, XidEvent

CGROUP_ROOT = Path("/sys/fs/cgroup")


def new_pod_uid() -> str:
    return str(uuid.uuid4())


def new_container_id() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex  # 64 hex characters, like containerd's


class Cgroups(ABC):
    """Container cgroups for worker processes; `kind` says how freezing happens. Two kinds:
    the kernel's freezer (`KernelCgroups`) and SIGSTOP/SIGCONT behind a fake tree (`EmulatedCgroups`)."""

    kind = ""
    locator: CgroupLocator

    @abstractmethod
    def add_container(self, pod_uid: str, container_id: str, pid: int) -> Path:
        """Put `pid` in a pod/container cgroup the agent's locator will attribute to `pod_uid`."""

    @abstractmethod
    def thaw_all(self) -> None:
        """Let every member run (before killing: a task frozen by the v1 freezer ignores SIGKILL)."""

    @abstractmethod
    def close(self) -> None:
        """Thaw and remove what `add_container` made."""


class KernelCgroups(Cgroups):
    """Our own subtree of the host's cgroups: `base` in the v2 hierarchy or the v1 freezer
    hierarchy. The agent's locator is rooted at `locator_root` (v2: `base`; v1: a directory whose
    `freezer` entry links to `base`), so the production paths (kubepods/burstable/pod<uid>/<id>)
    resolve inside our subtree and /proc/<pid>/cgroup names them."""

    def __init__(self, base: Path, version: CgroupVersion, locator_root: Path) -> None:
        self.base = base
        self.kind = f"kernel cgroup {version.value} freezer ({base})"
        self.locator = CgroupLocator(locator_root, Path("/proc"), version, CgroupDriver.CGROUPFS)
        self.dirs: list[Path] = []

    def add_container(self, pod_uid: str, container_id: str, pid: int) -> Path:
        rel = Path("kubepods") / "burstable" / f"pod{pod_uid}" / container_id
        (self.base / rel).mkdir(parents=True, exist_ok=True)
        (self.base / rel / "cgroup.procs").write_text(str(pid))
        path = self.locator.hierarchy / rel
        self.dirs.append(path)
        return path

    def thaw_all(self) -> None:
        freezer = Freezer(self.locator.version)
        for path in self.dirs:
            freezer.request(path, False)

    def close(self) -> None:
        self.thaw_all()
        for _ in range(50):  # killed workers leave their cgroups a moment after they die
            leftovers = sorted((p for p in self.base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for p in [*leftovers, self.base]:
                try:
                    p.rmdir()
                except OSError:
                    pass
            if not self.base.exists():
                return
            time.sleep(0.1)


class EmulatedCgroups(Cgroups):
    kind = "emulated: cgroup files on disk, cgroup.freeze applied as SIGSTOP/SIGCONT (no writable cgroup freezer here)"

    def __init__(self, root: Path) -> None:
        self.builder = CgroupTreeBuilder(root, CgroupVersion.V2, CgroupDriver.CGROUPFS)
        self.locator = self.builder.locator()
        self.members: dict[Path, int] = {}
        self.applied: dict[Path, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="freezer-emulator", daemon=True)
        self._thread.start()

    def add_container(self, pod_uid: str, container_id: str, pid: int) -> Path:
        path = self.builder.container(pod_uid, container_id, [pid])
        self.members[path] = pid
        self.applied[path] = False
        return path

    def _run(self) -> None:
        reported: dict[Path, bool] = {}
        rounds = 0
        while not self._stop.wait(0.002):
            rounds += 1
            if rounds % 10 == 0:  # every 20 ms, like the kernel's accounting: the agent's CPU wake signal
                for path, pid in list(self.members.items()):
                    usage = _cpu_usec(pid)
                    if usage is not None:
                        self.builder.set_cpu_usage(path, usage)
            for path, pid in list(self.members.items()):
                try:
                    want = (path / "cgroup.freeze").read_text().strip() == "1"
                except OSError:
                    continue
                if want != self.applied.get(path):
                    try:
                        os.kill(pid, signal.SIGSTOP if want else signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                    self.applied[path] = want
                # like the kernel: "frozen 1" only once the task has really stopped
                frozen = want and _stopped_or_gone(pid)
                if reported.get(path) != frozen:
                    try:
                        (path / "cgroup.events").write_text(f"populated 1\nfrozen {1 if frozen else 0}\n")
                    except OSError:
                        continue
                    reported[path] = frozen

    def thaw_all(self) -> None:
        for path in self.members:
            try:
                (path / "cgroup.freeze").write_text("0")
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for pid in self.members.values():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def _cpu_usec(pid: int) -> int | None:
    """CPU time of a process (utime + stime of /proc/<pid>/stat), in microseconds."""
    try:
        fields = stat_fields(pid)
        return (int(fields[11]) + int(fields[12])) * 1_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _stopped_or_gone(pid: int) -> bool:
    try:
        state = stat_fields(pid)[0]
    except OSError:
        return True
    return state in ("T", "t", "Z", "X")


def kernel_cgroups(workdir: Path, cgroup_root: Path = CGROUP_ROOT) -> tuple[KernelCgroups | None, str]:
    """A writable subtree of the host's cgroups (v2, or the v1 freezer, as production detects
    them), proven by freezing and thawing a sleeping process; else None and why."""
    version = detect_version(cgroup_root)
    name = f"tessera-gpu-checks-{os.getpid()}"
    if version is CgroupVersion.V2:
        base = cgroup_root / name
        locator_root = base
    else:
        if not (cgroup_root / "freezer" / "cgroup.procs").exists():
            return None, f"no cgroup v2 at {cgroup_root} and no v1 freezer hierarchy at {cgroup_root / 'freezer'}"
        base = cgroup_root / "freezer" / name
        locator_root = workdir / "cgroup-v1-root"
    sleeper = None
    cg = KernelCgroups(base, version, locator_root)
    try:
        base.mkdir(exist_ok=True)
        if version is CgroupVersion.V1:
            locator_root.mkdir(parents=True, exist_ok=True)
            link = locator_root / "freezer"
            if not link.is_symlink():
                link.symlink_to(base, target_is_directory=True)
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        probe = cg.add_container(new_pod_uid(), new_container_id(), sleeper.pid)
        freezer = Freezer(version)
        state = freezer.freeze_and_wait(probe, 2.0)
        freezer.request(probe, False)
        if state is not FreezeState.FROZEN:
            raise OSError(f"freezing a test process ended {state.value}")
    except OSError as exc:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        cg.close()
        return None, f"cannot use the {version.value} cgroups at {cgroup_root} ({exc})"
    sleeper.kill()
    sleeper.wait()
    cg.close()
    return KernelCgroups(base, version, locator_root), "ok"


@dataclass
class PidMapBackend:
    """`GpuBackend` that forwards to NVML and maps NVML PIDs to this PID namespace's PIDs when
    they differ (learnt per worker group; unknown foreign PIDs are dropped, never guessed)."""

    inner: Any
    identity: bool | None = None
    to_local: dict[int, int] = field(default_factory=dict)

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def list_gpus(self) -> list[GpuInfo]:
        return list(self.inner.list_gpus())

    def utilisation(self) -> list[GpuUtilisation]:
        return list(self.inner.utilisation())

    def clocks(self) -> list[GpuClocks]:
        return list(self.inner.clocks())

    def poll_xid_events(self, timeout_s: float) -> list[XidEvent]:
        return list(self.inner.poll_xid_events(timeout_s))

    def is_responsive(self, gpu: GpuIndex) -> bool:
        return bool(self.inner.is_responsive(gpu))

    def processes(self) -> list[ProcessSample]:
        samples = list(self.inner.processes())
        if self.identity is not False:
            return samples
        return [replace(s, pid=Pid(self.to_local[s.pid])) for s in samples if s.pid in self.to_local]

    def nvml_pid(self, local_pid: int) -> int | None:
        """The PID NVML reports for one of our processes (None when not learnt)."""
        if self.identity is not False:
            return local_pid
        return next((h for h, l in self.to_local.items() if l == local_pid), None)

    def raw_pids(self) -> set[int]:
        return {int(s.pid) for s in self.inner.processes()}

    def learn(self, workers: Sequence[Worker], before: set[int], timeout_s: float = 15.0) -> str:
        """After `workers` are ready: find their NVML PIDs (new since `before`)."""
        deadline = time.monotonic() + timeout_s
        local = {w.pid for w in workers}
        new: dict[int, int] = {}
        while time.monotonic() < deadline:
            new = {int(s.pid): int(s.used_memory_mib) for s in self.inner.processes() if int(s.pid) not in before}
            if local <= set(new):
                self.identity = True
                return "same PID namespace as NVML"
            if len(new) >= len(workers):
                break
            time.sleep(0.2)
        if self.identity is True:
            raise RuntimeError(f"NVML did not list workers {sorted(local - set(new))} although PIDs matched before")
        mapping = match_pids_by_memory({w.pid: int(w.spec.get("hold_mib", 0)) for w in workers}, new)
        self.identity = False
        self.to_local.update(mapping)
        return f"NVML reports host PIDs; mapped {mapping} by held memory"


@dataclass
class Context:
    """What every check gets: the machine, the knobs, the shared NVML backend and cgroups."""

    env: Environment
    gpu: Gpu
    seconds: float
    pattern: tuple[float, float]
    cycles: int
    workdir: Path
    artifacts: Path | None
    deadline: float
    ready_timeout_s: float = 180.0
    kernel_freezer: bool = True  # False: always the emulated cgroups (--freezer emulated)
    reference_rate: float | None = None  # matmuls/s of one worker alone on the GPU, natively
    reference_from: str | None = None
    _backend: PidMapBackend | None = None
    _cgroups: Cgroups | None = None
    cgroup_note: str = ""

    @property
    def native_pipe(self) -> Path:
        """An empty MPS pipe directory: a 'native' worker pointed here finds no MPS daemon and
        runs directly on the GPU even if a system daemon listens on /tmp/nvidia-mps."""
        path = self.workdir / "no-mps"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def backend(self) -> PidMapBackend:
        if self._backend is None:
            from tessera_node.gpu.nvml import NvmlBackend

            self._backend = PidMapBackend(NvmlBackend())
        self._backend.open()
        return self._backend

    def cgroups(self) -> Cgroups:
        if self._cgroups is None:
            kernel, why = kernel_cgroups(self.workdir) if self.kernel_freezer else (None, "--freezer emulated")
            if kernel is not None:
                self._cgroups, self.cgroup_note = kernel, kernel.kind
            else:
                self._cgroups = EmulatedCgroups(self.workdir / "cgroup-tree")
                self.cgroup_note = f"{self._cgroups.kind}; kernel freezer not used: {why}"
            before_kill(self._cgroups.thaw_all)
        return self._cgroups

    def close(self) -> None:
        if self._cgroups is not None:
            drop_before_kill(self._cgroups.thaw_all)
            self._cgroups.close()
            self._cgroups = None
        if self._backend is not None:
            self._backend.close()

    def left_s(self) -> float:
        return self.deadline - time.monotonic()
