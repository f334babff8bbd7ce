"""Test double of nvidia-ml-py (module pynvml) over the fake GPU's state (fakegpu_state.py).

FAKEGPU_PID_OFFSET adds an offset to every PID it reports, as NVML does seen from a container
without hostPID (it reports host PIDs); FAKEGPU_COMPUTE_MODE sets the compute mode.
"""
from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import fakegpu_state as fg

NVML_COMPUTEMODE_DEFAULT = 0
NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1
NVML_COMPUTEMODE_PROHIBITED = 2
NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
NVML_DEVICE_MIG_ENABLE = 1
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
nvmlEventTypeXidCriticalError = 8
_MIB = 1024 * 1024
_OFFSET = int(os.environ.get("FAKEGPU_PID_OFFSET", "0"))


class NVMLError(Exception):
    pass


class NVMLError_Timeout(NVMLError):  # noqa: N801 - pynvml's name
    pass


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlSystemGetDriverVersion() -> str:
    return "999.99-fake"


def nvmlDeviceGetCount() -> int:
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if index != 0:
        raise NVMLError("Invalid Argument")
    return 0


def nvmlDeviceGetUUID(handle: int) -> str:
    return fg.GPU_UUID


def nvmlDeviceGetName(handle: int) -> str:
    return "Fake H100 80GB HBM3"


def nvmlDeviceGetMigMode(handle: int) -> tuple[int, int]:
    raise NVMLError("Not Supported")


def nvmlDeviceGetNumGpuCores(handle: int) -> int:
    return 16896  # an H100 SXM: 132 SMs of 128 cores


def nvmlDeviceGetCudaComputeCapability(handle: int) -> tuple[int, int]:
    return (9, 0)


def nvmlDeviceGetComputeMode(handle: int) -> int:
    return int(os.environ.get("FAKEGPU_COMPUTE_MODE", "0"))


def nvmlDeviceGetMemoryInfo(handle: int) -> Any:
    used = sum(p["mem_mib"] for p in fg.processes()) * _MIB
    return SimpleNamespace(total=fg.GPU_MIB * _MIB, used=used, free=fg.GPU_MIB * _MIB - used)


def _procs(mps: bool) -> list[Any]:
    return [SimpleNamespace(pid=p["pid"] + _OFFSET, usedGpuMemory=p["mem_mib"] * _MIB)
            for p in fg.processes() if bool(p.get("pipe")) == mps]


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[Any]:
    return _procs(False)


def nvmlDeviceGetMPSComputeRunningProcesses(handle: int) -> list[Any]:
    return _procs(True)


def nvmlDeviceGetProcessUtilization(handle: int, since: int) -> list[Any]:
    """One sample per process per SAMPLE_PERIOD_S (older than `since`: none; none at all: NOT_FOUND)."""
    stamp = int(time.time() // fg.SAMPLE_PERIOD_S * fg.SAMPLE_PERIOD_S * 1e6)
    if stamp <= since:
        raise NVMLError("Not Found")
    window = 2 * fg.SAMPLE_PERIOD_S
    return [SimpleNamespace(pid=p["pid"] + _OFFSET, smUtil=60 if time.time() - p.get("last_active", 0) < window else 0,
                            memUtil=0, encUtil=0, decUtil=0, timeStamp=stamp) for p in fg.processes()]


def nvmlDeviceGetUtilizationRates(handle: int) -> Any:
    busy = any(time.time() - p.get("last_active", 0) < 0.2 for p in fg.processes())
    return SimpleNamespace(gpu=100 if busy else 0, memory=30 if busy else 0)


def nvmlDeviceGetClockInfo(handle: int, kind: int) -> int:
    return 1980 if kind == NVML_CLOCK_SM else 2619


def nvmlDeviceGetMaxClockInfo(handle: int, kind: int) -> int:
    return 1980 if kind == NVML_CLOCK_SM else 2619


def nvmlEventSetCreate() -> object:
    return object()


def nvmlDeviceRegisterEvents(handle: int, kinds: int, event_set: object) -> None:
    pass


def nvmlEventSetWait(event_set: object, timeout_ms: int) -> Any:
    time.sleep(timeout_ms / 1000.0)
    raise NVMLError_Timeout("Timeout")


def nvmlEventSetFree(event_set: object) -> None:
    pass
