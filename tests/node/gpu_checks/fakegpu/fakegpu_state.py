"""Shared state of the fake GPU (test double of the NVIDIA driver, NVML, MPS and PyTorch).

Every fake CUDA process writes `<state>/<pid>.json` (memory held, last time it ran a kernel, the
MPS pipe directory it is a client of); the fake NVML and the fake MPS control daemon read them.
One GPU. Nothing here is Tessera code: it stands in for the driver so the GPU checks'
orchestration runs end to end on machines without a GPU.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

GPU_UUID = "GPU-0f0f0f0f-1111-2222-3333-444444444444"
GPU_MIB = 81559
CONTEXT_MIB = 300  # what a CUDA context costs in the fake
SAMPLE_PERIOD_S = 0.1  # the fake driver samples process utilisation this often


def state_dir() -> Path:
    path = Path(os.environ.get("FAKEGPU_STATE", "/tmp/fakegpu-state"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def publish(info: dict[str, Any]) -> None:
    path = state_dir() / f"{os.getpid()}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), **info}))
    os.replace(tmp, path)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def processes() -> list[dict[str, Any]]:
    out = []
    for path in state_dir().glob("*.json"):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if alive(int(info["pid"])):
            out.append(info)
        else:
            path.unlink(missing_ok=True)
    return out


def daemon_alive(pipe: str | None) -> bool:
    if not pipe:
        return False
    try:
        pid = int((Path(pipe) / "nvidia-cuda-mps-control.pid").read_text())
    except (OSError, ValueError):
        return False
    return alive(pid) and (Path(pipe) / "control").exists()


def daemon_defaults(pipe: str) -> dict[str, Any]:
    try:
        return dict(json.loads((Path(pipe) / "defaults.json").read_text()))
    except (OSError, ValueError):
        return {}


def parse_mib(value: str) -> int:
    """'2048M', '2048MB', '2G' -> MiB."""
    v = value.strip().upper()
    if v.endswith("MB"):
        return int(v[:-2])
    if v.endswith("M"):
        return int(v[:-1])
    if v.endswith("G"):
        return int(v[:-1]) * 1024
    return int(v) // (1024 * 1024)


def now_us() -> int:
    return int(time.time() * 1e6)
