"""A scripted stand-in for the pynvml module, built with `FakeNvml.builder()`.

Only the calls `NvmlBackend` makes exist; anything else raises AttributeError, so a new call in
the adapter shows up here as a test failure rather than silently passing. Failures are scripted
per call name and GPU index, the way a GPU falling off the bus looks to NVML's clients.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

_MIB = 1024 * 1024


class NVMLError(Exception):
    pass


class NVMLError_Timeout(NVMLError):  # noqa: N801 - pynvml's name
    pass


@dataclass
class FakeGpu:
    uuid: str
    name: str
    memory_mib: int
    mig: int | None = None  # None: NOT_SUPPORTED
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, MiB)
    mps_processes: list[tuple[int, int]] = field(default_factory=list)
    samples: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, sm %, timestamp µs)
    cores: int | None = 16896  # None: NOT_SUPPORTED (H100 SXM: 132 SMs x 128)
    compute_capability: tuple[int, int] = (9, 0)


class FakeNvml:
    NVMLError = NVMLError
    NVMLError_Timeout = NVMLError_Timeout
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.failing: dict[str, set[int | None]] = {}  # call name -> GPU indexes (None: every call)
        self.initialised = 0
        self.event_sets_open = 0
        self.xids: list[tuple[int, int]] = []  # (gpu index, xid) queued for nvmlEventSetWait

    @staticmethod
    def builder() -> FakeNvmlBuilder:
        return FakeNvmlBuilder()

    def _check(self, call: str, index: int | None = None) -> None:
        failing = self.failing.get(call, set())
        if None in failing or index in failing:
            raise NVMLError(f"{call}: GPU is lost")

    def _gpu(self, handle: int) -> FakeGpu:
        return self.gpus[handle]

    def nvmlInit(self) -> None:
        self._check("nvmlInit")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1
        self._check("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check("nvmlDeviceGetHandleByIndex", index)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return self._gpu(handle).uuid.encode()  # old pynvml returns bytes; the adapter accepts both

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        mig = self._gpu(handle).mig
        if mig is None:
            raise NVMLError("Not Supported")
        return mig, mig

    def nvmlDeviceGetNumGpuCores(self, handle: int) -> int:
        """NVML: "On MIG-enabled GPUs, querying the device's core count is currently not supported"."""
        gpu = self._gpu(handle)
        if gpu.cores is None or gpu.mig == self.NVML_DEVICE_MIG_ENABLE:
            raise NVMLError("Not Supported")
        return gpu.cores

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return self._gpu(handle).compute_capability

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        self._check("nvmlDeviceGetMemoryInfo", handle)
        gpu = self._gpu(handle)
        used = sum(m for _, m in gpu.processes + gpu.mps_processes) * _MIB
        return SimpleNamespace(total=gpu.memory_mib * _MIB, used=used, free=gpu.memory_mib * _MIB - used)

    def nvmlDeviceGetProcessUtilization(self, handle: int, since: int) -> list[Any]:
        fresh = [s for s in self._gpu(handle).samples if s[2] > since]
        if not fresh:
            raise NVMLError("Not Found")
        return [SimpleNamespace(pid=pid, smUtil=sm, memUtil=0, timeStamp=stamp) for pid, sm, stamp in fresh]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        self._check("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=mib * _MIB) for pid, mib in self._gpu(handle).processes]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=mib * _MIB) for pid, mib in self._gpu(handle).mps_processes]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        self._check("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=50, memory=10)

    def nvmlEventSetCreate(self) -> object:
        self._check("nvmlEventSetCreate")
        self.event_sets_open += 1
        return object()

    def nvmlDeviceRegisterEvents(self, handle: int, kinds: int, event_set: object) -> None:
        self._check("nvmlDeviceRegisterEvents", handle)

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> Any:
        self._check("nvmlEventSetWait")
        if not self.xids:
            raise NVMLError_Timeout("Timeout")
        index, xid = self.xids.pop(0)
        return SimpleNamespace(device=index, eventData=xid)

    def nvmlEventSetFree(self, event_set: object) -> None:
        self.event_sets_open -= 1


class FakeNvmlBuilder:
    def __init__(self) -> None:
        self._gpus: list[FakeGpu] = []
        self._failing: dict[str, set[int | None]] = {}

    def gpu(
        self, name: str = "NVIDIA H100 80GB HBM3", memory_mib: int = 81559, *, mig: int | None = None,
        cores: int | None = 16896, compute_capability: tuple[int, int] = (9, 0),
    ) -> FakeNvmlBuilder:
        self._gpus.append(FakeGpu(f"GPU-fake-{len(self._gpus)}", name, memory_mib, mig, cores=cores, compute_capability=compute_capability))
        return self

    def process(self, gpu: int, pid: int, mib: int, *, mps: bool = False) -> FakeNvmlBuilder:
        (self._gpus[gpu].mps_processes if mps else self._gpus[gpu].processes).append((pid, mib))
        return self

    def sample(self, gpu: int, pid: int, sm_pct: int, timestamp_us: int) -> FakeNvmlBuilder:
        self._gpus[gpu].samples.append((pid, sm_pct, timestamp_us))
        return self

    def failing(self, call: str, gpu: int | None = None) -> FakeNvmlBuilder:
        self._failing.setdefault(call, set()).add(gpu)
        return self

    def build(self) -> FakeNvml:
        fake = FakeNvml(self._gpus)
        fake.failing = self._failing
        return fake
