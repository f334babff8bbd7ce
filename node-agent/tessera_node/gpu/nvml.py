"""`GpuBackend` over NVML (pynvml). The only module that imports pynvml.

Handles are looked up per call from the index rather than cached, so `close()` (nvmlShutdown)
really leaves nothing open: the MIG manager needs every NVML client gone before it can change a
GPU's MIG mode.

Every NVML failure leaves this module as `GpuBackendError`, the one error the agent loop and the
device plugin handle: a raw `NVMLError` (a GPU falling off the bus, the driver reloading) would
otherwise end their loops. A GPU that fails while others answer is left out of `processes()`
rather than blanking the whole node: the health probe (`is_responsive`) is what takes it out.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

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
# FP32 cores per SM by compute capability (CUDA C++ Programming Guide, "Compute Capabilities",
# arithmetic instruction throughput): 64 on GP100, Volta, Turing and GA100; 128 on GP10x, GA10x,
# Ada, Hopper and Blackwell. H100 SXM: 16896 cores / 128 = 132 SMs.
CORES_PER_SM: Final[dict[tuple[int, int], int]] = {
    (6, 0): 64, (6, 1): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128,
    (8, 9): 128, (9, 0): 128, (10, 0): 128, (10, 3): 128, (12, 0): 128, (12, 1): 128,
}
_log = logging.getLogger(__name__)
_R = TypeVar("_R")
if TYPE_CHECKING:  # typing.ParamSpec is 3.10+; the GPU checks import this module on Python 3.9
    from typing import Concatenate, ParamSpec

    _P = ParamSpec("_P")


def _load_pynvml() -> Any:
    with warnings.catch_warnings():
        # The `pynvml` shim warns that it is deprecated in favour of nvidia-ml-py, which it wraps.
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml

    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_errors(method: Callable[Concatenate[NvmlBackend, _P], _R]) -> Callable[Concatenate[NvmlBackend, _P], _R]:
    """Re-raise NVML's own errors as `GpuBackendError`, saying what to check."""

    @functools.wraps(method)
    def wrapper(self: NvmlBackend, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except self._nvml.NVMLError as exc:
            raise GpuBackendError(
                f"NVML {method.__name__} failed ({exc}); check `nvidia-smi` on the node and the kernel log for XID errors"
            ) from exc

    return wrapper


class NvmlBackend:
    """Real GPUs. `open()` fails with a clear `GpuBackendError` where no NVIDIA driver is present.

    `nvml` is the pynvml module; tests hand in a scripted stand-in (tests/node/gpu/fake_nvml.py)."""

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml if nvml is not None else _load_pynvml()
        self._lock = threading.Lock()
        self._open = False
        self._event_set: Any = None
        self._last_process_sample_us: dict[int, int] = {}
        self._failing_gpus: set[int] = set()

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
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:  # the library is released either way; nothing to retry
                _log.warning("nvmlShutdown failed: %s", exc)
            self._open = False

    def _register_xid_events(self) -> Any:
        """An event set for XID errors, or None where the driver cannot give one (vGPU guests,
        some boards): health then relies on `is_responsive` alone, which is slower but still works."""
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            _log.warning("NVML cannot create an event set (%s); XID errors will be seen only through the health probe", exc)
            return None
        registered = 0
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
                registered += 1
            except nvml.NVMLError:  # NOT_SUPPORTED on some boards: that GPU relies on is_responsive
                continue
        if not registered:
            nvml.nvmlEventSetFree(event_set)
            return None
        return event_set

    def _handle(self, index: int) -> Any:
        if not self._open:
            raise GpuBackendError("NVML backend is closed; call open() first")
        return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def _count(self) -> int:
        if not self._open:
            raise GpuBackendError("NVML backend is closed; call open() first")
        return int(self._nvml.nvmlDeviceGetCount())

    @_nvml_errors
    def list_gpus(self) -> list[GpuInfo]:
        nvml = self._nvml
        gpus = []
        for index in range(self._count()):
            handle = self._handle(index)
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(handle)
                mig = MigMode.ENABLED if current == nvml.NVML_DEVICE_MIG_ENABLE else MigMode.DISABLED
            except nvml.NVMLError:  # NOT_SUPPORTED: boards without MIG
                mig = MigMode.UNSUPPORTED
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            sm_count = None if mig is MigMode.ENABLED else self._sm_count(handle)
            gpus.append(
                GpuInfo(GpuIndex(index), _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle)), int(memory.total // _MIB), mig, sm_count)
            )
        return gpus

    def _sm_count(self, handle: Any) -> int | None:
        """CUDA cores (`nvmlDeviceGetNumGpuCores`, not supported on MIG-enabled GPUs) over the cores
        per SM of the compute capability (`nvmlDeviceGetCudaComputeCapability`); None where NVML
        cannot say or the architecture is not in `CORES_PER_SM`. The MPS percentage of fixed shares
        is rounded to whole TPCs with it (`tessera.model.contract.mps_thread_percentage`)."""
        nvml = self._nvml
        try:
            cores = int(nvml.nvmlDeviceGetNumGpuCores(handle))
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        except nvml.NVMLError:
            return None
        per_sm = CORES_PER_SM.get((int(major), int(minor)))
        if per_sm is None or cores <= 0 or cores % per_sm:
            return None
        return cores // per_sm

    @_nvml_errors
    def processes(self) -> list[ProcessSample]:
        nvml = self._nvml
        out: list[ProcessSample] = []
        count = self._count()
        for index in range(count):
            try:
                out += self._gpu_processes(index)
            except nvml.NVMLError as exc:
                if index not in self._failing_gpus:
                    _log.warning("NVML cannot list processes on GPU %d (%s); its containers go unmeasured until it answers", index, exc)
                self._failing_gpus.add(index)
                continue
            self._failing_gpus.discard(index)
        if count and len(self._failing_gpus) == count:
            raise GpuBackendError("NVML answers for no GPU on this node; check `nvidia-smi` and the kernel log for XID errors")
        return out

    def _gpu_processes(self, index: int) -> list[ProcessSample]:
        nvml = self._nvml
        handle = self._handle(index)
        sm_by_pid: dict[int, tuple[int, int]] = {}  # pid -> (timestamp, sm %): keep the newest sample
        since = self._last_process_sample_us.get(index, 0)
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, since)
        except nvml.NVMLError:  # NOT_FOUND when no sample is newer than `since`
            samples = []
        for sample in samples:
            stamp, pid = int(sample.timeStamp), int(sample.pid)
            if stamp >= sm_by_pid.get(pid, (-1, 0))[0]:
                sm_by_pid[pid] = (stamp, int(sample.smUtil))
            self._last_process_sample_us[index] = max(self._last_process_sample_us.get(index, 0), stamp)
        procs = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        try:
            procs += list(nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle))
        except nvml.NVMLError:  # NOT_SUPPORTED on old drivers; MPS clients then show up above
            pass
        out: list[ProcessSample] = []
        seen: set[int] = set()
        for proc in procs:
            pid = int(proc.pid)
            if pid in seen:
                continue
            seen.add(pid)
            used = int(proc.usedGpuMemory or 0) // _MIB
            out.append(ProcessSample(Pid(pid), GpuIndex(index), used, sm_by_pid.get(pid, (0, 0))[1]))
        return out

    @_nvml_errors
    def utilisation(self) -> list[GpuUtilisation]:
        nvml = self._nvml
        out = []
        for index in range(self._count()):
            handle = self._handle(index)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            out.append(GpuUtilisation(GpuIndex(index), int(rates.gpu), int(rates.memory), int(memory.used // _MIB)))
        return out

    @_nvml_errors
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

    @_nvml_errors
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
        except (self._nvml.NVMLError, GpuBackendError):
            return False
        return True
