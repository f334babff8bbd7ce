"""`GpuBackend` over NVML (pynvml). The only module that imports pynvml.

Handles are looked up per call from the index rather than cached, so `close()` (nvmlShutdown)
really leaves nothing open: the MIG manager needs every NVML client gone before it can change a
GPU's MIG mode.
"""
from __future__ import annotations

import threading
import time
import warnings
from typing import Any

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

_MIB = 1024 * 1024


def _load_pynvml() -> Any:
    with warnings.catch_warnings():
        # The `pynvml` shim warns that it is deprecated in favour of nvidia-ml-py, which it wraps.
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml

    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend:
    """Real GPUs. `open()` fails with a clear `GpuBackendError` where no NVIDIA driver is present."""

    def __init__(self) -> None:
        self._nvml = _load_pynvml()
        self._lock = threading.Lock()
        self._open = False
        self._event_set: Any = None
        self._last_process_sample_us: dict[int, int] = {}

    def open(self) -> None:
        with self._lock:
            if self._open:
                return
            try:
                self._nvml.nvmlInit()
            except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
                raise GpuBackendError(
                    f"cannot initialise NVML ({exc}); run on a node with the NVIDIA driver, or pass --simulate SPEC"
                ) from exc
            self._open = True
            self._event_set = self._register_xid_events()

    def close(self) -> None:
        with self._lock:
            if not self._open:
                return
            if self._event_set is not None:
                try:
                    self._nvml.nvmlEventSetFree(self._event_set)
                except Exception:  # freeing on a GPU that fell off the bus may fail; shutdown still must run
                    pass
                self._event_set = None
            self._nvml.nvmlShutdown()
            self._open = False

    def _register_xid_events(self) -> Any:
        nvml = self._nvml
        event_set = nvml.nvmlEventSetCreate()
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
            except Exception:  # NOT_SUPPORTED on some boards: health then relies on is_responsive only
                continue
        return event_set

    def _handle(self, index: int) -> Any:
        if not self._open:
            raise GpuBackendError("NVML backend is closed; call open() first")
        return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def _count(self) -> int:
        if not self._open:
            raise GpuBackendError("NVML backend is closed; call open() first")
        return int(self._nvml.nvmlDeviceGetCount())

    def list_gpus(self) -> list[GpuInfo]:
        nvml = self._nvml
        gpus = []
        for index in range(self._count()):
            handle = self._handle(index)
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(handle)
                mig = MigMode.ENABLED if current == nvml.NVML_DEVICE_MIG_ENABLE else MigMode.DISABLED
            except Exception:
                mig = MigMode.UNSUPPORTED
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuInfo(GpuIndex(index), _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle)), int(memory.total // _MIB), mig)
            )
        return gpus

    def processes(self) -> list[ProcessSample]:
        nvml = self._nvml
        out: list[ProcessSample] = []
        for index in range(self._count()):
            handle = self._handle(index)
            sm_by_pid: dict[int, int] = {}
            try:
                since = self._last_process_sample_us.get(index, 0)
                for sample in nvml.nvmlDeviceGetProcessUtilization(handle, since):
                    sm_by_pid[int(sample.pid)] = int(sample.smUtil)
                    self._last_process_sample_us[index] = max(since, int(sample.timeStamp))
            except Exception:  # NOT_FOUND when no samples are newer than `since`
                pass
            procs = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
            try:
                procs += list(nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle))
            except Exception:
                pass
            seen: set[int] = set()
            for proc in procs:
                pid = int(proc.pid)
                if pid in seen:
                    continue
                seen.add(pid)
                used = int(proc.usedGpuMemory or 0) // _MIB
                out.append(ProcessSample(Pid(pid), GpuIndex(index), used, sm_by_pid.get(pid, 0)))
        return out

    def utilisation(self) -> list[GpuUtilisation]:
        nvml = self._nvml
        out = []
        for index in range(self._count()):
            handle = self._handle(index)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            out.append(GpuUtilisation(GpuIndex(index), int(rates.gpu), int(rates.memory), int(memory.used // _MIB)))
        return out

    def clocks(self) -> list[GpuClocks]:
        nvml = self._nvml
        out = []
        for index in range(self._count()):
            handle = self._handle(index)
            out.append(
                GpuClocks(
                    GpuIndex(index),
                    int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                    int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
                    int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
                    int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)),
                )
            )
        return out

    def poll_xid_events(self, timeout_s: float) -> list[XidEvent]:
        nvml = self._nvml
        if not self._open:
            raise GpuBackendError("NVML backend is closed; call open() first")
        if self._event_set is None:
            time.sleep(timeout_s)
            return []
        uuid_to_index = {_text(nvml.nvmlDeviceGetUUID(self._handle(i))): i for i in range(self._count())}
        events: list[XidEvent] = []
        wait_ms = int(timeout_s * 1000)
        while True:
            try:
                data = nvml.nvmlEventSetWait(self._event_set, wait_ms)
            except nvml.NVMLError_Timeout:
                return events
            index = uuid_to_index.get(_text(nvml.nvmlDeviceGetUUID(data.device)), -1)
            events.append(XidEvent(GpuIndex(index), int(data.eventData), "nvml event"))
            wait_ms = 0  # drain what is already queued, then return

    def is_responsive(self, gpu: GpuIndex) -> bool:
        try:
            self._nvml.nvmlDeviceGetMemoryInfo(self._handle(gpu))
        except Exception:
            return False
        return True
