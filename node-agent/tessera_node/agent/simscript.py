"""Drive a simulated node from a JSON file, for `tessera node agent --simulate ... --simulate-processes FILE`.

The file lists the GPU processes the simulated driver reports; the agent re-reads it whenever it
changes, so a demo or an end-to-end test (the agent running as a subprocess) scripts online bursts
by rewriting the file:

    {"processes": [{"pid": 4242, "gpu": 0, "memoryMiB": 2048, "smPct": 80}]}

Processes listed earlier and missing now have exited.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from tessera_node.gpu.backend import GpuClocks, GpuIndex, GpuInfo, GpuUtilisation, ProcessSample, XidEvent
from tessera_node.gpu.simulated import SimulatedBackend


class ProcessScriptError(ValueError):
    pass


def load_process_script(path: Path) -> list[tuple[int, int, int, int]]:
    """(pid, gpu, memory MiB, SM %) per line of the file."""
    expected = '; expected {"processes": [{"pid": 1, "gpu": 0, "memoryMiB": 512, "smPct": 50}]}'
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProcessScriptError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ProcessScriptError(f"{path}: not UTF-8 text (byte {exc.start}){expected}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProcessScriptError(f"{path}:{exc.lineno}: not JSON: {exc.msg}{expected}") from None
    try:
        return [(int(p["pid"]), int(p["gpu"]), int(p.get("memoryMiB", 0)), int(p.get("smPct", 0))) for p in data.get("processes", [])]
    except (AttributeError, ValueError, KeyError, TypeError) as exc:
        raise ProcessScriptError(f"{path}: not a process list ({type(exc).__name__}: {exc}){expected}") from None


@dataclass
class ScriptedBackend:
    """A `GpuBackend` over a `SimulatedBackend` whose processes follow a JSON file."""

    sim: SimulatedBackend
    script: Path
    _stamp: tuple[int, int] | None = None
    _pids: set[int] = field(default_factory=set)

    def _reload(self) -> None:
        try:
            st = os.stat(self.script)
        except FileNotFoundError:
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            rows = load_process_script(self.script)
        except ProcessScriptError:
            return  # a half-written file: keep the previous script, read it again next tick
        self._stamp = stamp
        for pid in self._pids - {r[0] for r in rows}:
            self.sim.remove_process(pid)
        for pid, gpu, memory, sm in rows:
            self.sim.add_process(pid, gpu, memory, sm)
        self._pids = {r[0] for r in rows}

    def open(self) -> None:
        self.sim.open()

    def close(self) -> None:
        self.sim.close()

    def list_gpus(self) -> list[GpuInfo]:
        return self.sim.list_gpus()

    def processes(self) -> list[ProcessSample]:
        self._reload()
        return self.sim.processes()

    def utilisation(self) -> list[GpuUtilisation]:
        return self.sim.utilisation()

    def clocks(self) -> list[GpuClocks]:
        return self.sim.clocks()

    def poll_xid_events(self, timeout_s: float) -> list[XidEvent]:
        return self.sim.poll_xid_events(timeout_s)

    def is_responsive(self, gpu: GpuIndex) -> bool:
        return self.sim.is_responsive(gpu)


@dataclass
class SimulatedKiller:
    """`ProcessKiller` for simulated nodes: the killed process disappears from the driver."""

    sim: SimulatedBackend
    killed: list[int] = field(default_factory=list)

    def kill(self, pid: int) -> bool:
        self.killed.append(pid)
        self.sim.remove_process(pid)
        return True
