"""A simulated GPU node: scripted GPUs, processes, utilisation and Xid events.

Built with `SimulatedBackend.from_spec("H100-80GB:8")` or the `SimulatedNodeBuilder`, and driven at
run time through its scripting methods (`add_process`, `set_utilisation`, `inject_xid`,
`set_responsive`, ...). All methods are thread-safe because tests script the node while the
device plugin and the agent read it from their own threads.
"""
from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field, replace

from tessera_node.gpu.backend import (
    GpuBackendError,
    GpuClocks,
    GpuIndex,
    GpuInfo,
    GpuUtilisation,
    MigMode,
    Pid,
    ProcessSample,
    XidEvent,
)
from tessera_node.gpu.spec import parse_spec

_SM_MAX_MHZ = 1980
_MEM_MAX_MHZ = 2619


def simulated_uuid(node_seed: str, index: int) -> str:
    """Stable, UUID-shaped GPU id so that restarts of a simulated node keep the same GPUs."""
    digest = hashlib.sha256(f"{node_seed}/{index}".encode()).hexdigest()
    return f"GPU-{digest[0:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


@dataclass
class _GpuState:
    info: GpuInfo
    gpu_pct: int = 0
    memory_pct: int = 0
    responsive: bool = True


@dataclass
class _Script:
    gpus: list[_GpuState]
    processes: dict[tuple[Pid, GpuIndex], ProcessSample] = field(default_factory=dict)
    pending_xids: list[XidEvent] = field(default_factory=list)


class SimulatedBackend:
    """`GpuBackend` over a scripted node."""

    def __init__(self, gpus: list[GpuInfo]) -> None:
        self._lock = threading.Condition()
        self._script = _Script([_GpuState(g) for g in gpus])
        self._open = False
        self.open_count = 0  # how many times open() acquired handles; tests check MIG pause releases them

    @staticmethod
    def from_spec(spec: str, *, node_seed: str = "sim") -> SimulatedBackend:
        return SimulatedNodeBuilder(node_seed).spec(spec).build()

    # --- GpuBackend -------------------------------------------------------------------------
    def open(self) -> None:
        with self._lock:
            if not self._open:
                self._open = True
                self.open_count += 1

    def close(self) -> None:
        with self._lock:
            self._open = False
            self._lock.notify_all()

    @property
    def is_open(self) -> bool:
        with self._lock:
            return self._open

    def _require_open(self) -> None:
        if not self._open:
            raise GpuBackendError("simulated GPU backend is closed; call open() first")

    def list_gpus(self) -> list[GpuInfo]:
        with self._lock:
            self._require_open()
            # like NVML: no core count on a MIG-enabled GPU
            return [replace(g.info, sm_count=None) if g.info.mig_mode is MigMode.ENABLED else g.info for g in self._script.gpus]

    def processes(self) -> list[ProcessSample]:
        with self._lock:
            self._require_open()
            return [p for p in self._script.processes.values() if self._script.gpus[p.gpu].responsive]

    def utilisation(self) -> list[GpuUtilisation]:
        with self._lock:
            self._require_open()
            out = []
            for g in self._script.gpus:
                used = sum(p.used_memory_mib for p in self._script.processes.values() if p.gpu == g.info.index)
                out.append(GpuUtilisation(g.info.index, g.gpu_pct, g.memory_pct, used))
            return out

    def clocks(self) -> list[GpuClocks]:
        with self._lock:
            self._require_open()
            # Busy GPUs boost to max; idle ones sit at a low clock, as real ones do.
            return [
                GpuClocks(g.info.index, _SM_MAX_MHZ if g.gpu_pct else 345, _MEM_MAX_MHZ if g.gpu_pct else 405, _SM_MAX_MHZ, _MEM_MAX_MHZ)
                for g in self._script.gpus
            ]

    def poll_xid_events(self, timeout_s: float) -> list[XidEvent]:
        with self._lock:
            self._require_open()
            if not self._script.pending_xids and timeout_s > 0:
                self._lock.wait(timeout_s)
            events, self._script.pending_xids = self._script.pending_xids, []
            return events

    def is_responsive(self, gpu: GpuIndex) -> bool:
        with self._lock:
            self._require_open()
            return self._script.gpus[gpu].responsive

    # --- scripting --------------------------------------------------------------------------
    def _gpu(self, gpu: int) -> _GpuState:
        if not 0 <= gpu < len(self._script.gpus):
            raise IndexError(f"simulated node has GPUs 0..{len(self._script.gpus) - 1}, not {gpu}")
        return self._script.gpus[gpu]

    def add_process(self, pid: int, gpu: int, memory_mib: int, sm_pct: int = 0) -> None:
        """Start (or update) a process on a GPU."""
        with self._lock:
            self._gpu(gpu)
            self._script.processes[(Pid(pid), GpuIndex(gpu))] = ProcessSample(Pid(pid), GpuIndex(gpu), memory_mib, sm_pct)

    def remove_process(self, pid: int) -> None:
        with self._lock:
            for key in [k for k in self._script.processes if k[0] == pid]:
                del self._script.processes[key]

    def set_utilisation(self, gpu: int, gpu_pct: int, memory_pct: int = 0) -> None:
        with self._lock:
            state = self._gpu(gpu)
            state.gpu_pct, state.memory_pct = gpu_pct, memory_pct

    def inject_xid(self, gpu: int, xid: int, detail: str = "") -> None:
        """Queue an Xid event, as the driver would report it."""
        with self._lock:
            self._gpu(gpu)
            self._script.pending_xids.append(XidEvent(GpuIndex(gpu), xid, detail))
            self._lock.notify_all()

    def set_responsive(self, gpu: int, responsive: bool) -> None:
        """A GPU that is not responsive behaves as if it fell off the bus (e.g. Xid 79)."""
        with self._lock:
            self._gpu(gpu).responsive = responsive

    def set_mig_mode(self, gpu: int, mode: MigMode) -> None:
        with self._lock:
            state = self._gpu(gpu)
            state.info = replace(state.info, mig_mode=mode)


class SimulatedNodeBuilder:
    """Small builder for simulated nodes: ``SimulatedNodeBuilder().spec("T4:1,A10:2").process(1, 0, 512).build()``."""

    def __init__(self, node_seed: str = "sim") -> None:
        self._seed = node_seed
        self._gpus: list[GpuInfo] = []
        self._processes: list[tuple[int, int, int, int]] = []
        self._mig: dict[int, MigMode] = {}

    def spec(self, spec: str) -> SimulatedNodeBuilder:
        for model in parse_spec(spec):
            index = len(self._gpus)
            self._gpus.append(GpuInfo(GpuIndex(index), simulated_uuid(self._seed, index), model.model, model.memory_mib, sm_count=model.sm_count))
        return self

    def gpu(self, model: str, memory_mib: int) -> SimulatedNodeBuilder:
        index = len(self._gpus)
        self._gpus.append(GpuInfo(GpuIndex(index), simulated_uuid(self._seed, index), model, memory_mib))
        return self

    def mig(self, gpu: int, mode: MigMode) -> SimulatedNodeBuilder:
        self._mig[gpu] = mode
        return self

    def process(self, pid: int, gpu: int, memory_mib: int, sm_pct: int = 0) -> SimulatedNodeBuilder:
        self._processes.append((pid, gpu, memory_mib, sm_pct))
        return self

    def build(self) -> SimulatedBackend:
        gpus = [replace(g, mig_mode=self._mig.get(g.index, g.mig_mode)) for g in self._gpus]
        backend = SimulatedBackend(gpus)
        for pid, gpu, memory, sm in self._processes:
            backend.add_process(pid, gpu, memory, sm)
        return backend
