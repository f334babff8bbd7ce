"""Test double of the few PyTorch calls the GPU checks' worker makes (no GPU on CI machines).

A matmul takes 2 ms of the fake GPU's time (synchronize() waits for it), scaled by 100 / the MPS active thread percentage when the process is a
client of a live fake MPS daemon (the same pipe directory); memory is accounted per process,
capped by CUDA_MPS_PINNED_DEVICE_MEM_LIMIT or the daemon's default; the fake NVML reads it all.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import fakegpu_state as fg  # noqa: E402

__version__ = "0.0+fake"
version = SimpleNamespace(cuda="12.4")
uint8 = "uint8"
float32 = "float32"
MM_SECONDS = 0.002


class OutOfMemoryError(RuntimeError):
    pass


class device:  # noqa: N801 - torch's name
    def __init__(self, kind: str) -> None:
        self.type = kind


class Tensor:
    def __init__(self, mib: float) -> None:
        self.mib = mib


_PIPE = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
_MPS = fg.daemon_alive(_PIPE)
_DEFAULTS = fg.daemon_defaults(_PIPE) if _MPS and _PIPE else {}
_held = 0.0
_last_publish = 0.0
_last_active = 0.0
_busy_until = 0.0


def _pct() -> int:
    if not _MPS:
        return 100
    return min(int(os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")), int(_DEFAULTS.get("pct", 100)))


def _limit_mib() -> int | None:
    if not _MPS:
        return None
    env = os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
    if env:
        for part in env.split(","):
            dev, _, value = part.partition("=")
            if dev.strip() == "0":
                return fg.parse_mib(value)
    mem = _DEFAULTS.get("mem")
    return fg.parse_mib(mem) if mem else None


def _publish(force: bool = False) -> None:
    global _last_publish
    now = time.monotonic()
    if force or now - _last_publish > 0.02:
        fg.publish({"mem_mib": int(fg.CONTEXT_MIB + _held), "last_active": _last_active, "pipe": _PIPE if _MPS else None})
        _last_publish = now


def _alloc(mib: float) -> Tensor:
    global _held
    limit = _limit_mib()
    if limit is not None and _held + mib > limit:
        raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {mib:.0f} MiB (fake MPS limit {limit} MiB)")
    _held += mib
    _publish(force=True)
    return Tensor(mib)


def _size_mib(shape: tuple[Any, ...], dtype: Any) -> float:
    count = 1
    for n in shape:
        count *= int(n)
    return count * (1 if dtype == uint8 else 4) / (1024 * 1024)


def randn(*shape: int, device: Any = None, dtype: Any = None) -> Tensor:
    return _alloc(_size_mib(shape, dtype))


def empty(*shape: int, device: Any = None, dtype: Any = None) -> Tensor:
    return _alloc(_size_mib(shape, dtype))


def ones(*shape: int, device: Any = None, dtype: Any = None) -> Tensor:
    return _alloc(_size_mib(shape, dtype))


def mm(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    """Queued like a kernel: the fake GPU starts it when it is free (or now, if idle) and it takes
    `cost`; the CPU waits only in synchronize(), as with a real GPU."""
    global _busy_until
    _busy_until = max(time.monotonic(), _busy_until) + MM_SECONDS * 100.0 / _pct()
    return out if out is not None else Tensor(a.mib)


class cuda:  # noqa: N801 - torch's name
    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def synchronize() -> None:
        global _last_active
        wait = _busy_until - time.monotonic()
        if wait > 0:
            time.sleep(wait)
            _last_active = time.time()
        _publish()

    @staticmethod
    def get_device_name(dev: Any = None) -> str:
        return "Fake GPU"

    @staticmethod
    def mem_get_info(dev: Any = None) -> tuple[int, int]:
        total = (_limit_mib() or fg.GPU_MIB) * 1024 * 1024
        return total - int(_held * 1024 * 1024), total


_publish(force=True)  # a CUDA context exists from import on, as after torch's lazy init
