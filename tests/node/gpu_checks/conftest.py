"""The GPU checks (node-agent/gpu-checks/) on machines without a GPU.

Pure parts (figures, targets, skip decisions, report shape) are tested directly. The whole
script runs end to end against `fakegpu/`: test doubles of PyTorch, pynvml and
nvidia-cuda-mps-control (the driver side only; every Tessera module runs for real).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpucheck_paths import FAKEGPU, REPO


@pytest.fixture
def fake_gpu_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a subprocess that should see the fake GPU instead of a real one."""
    control = FAKEGPU / "bin" / "nvidia-cuda-mps-control"
    if not os.access(control, os.X_OK):  # a checkout that lost the executable bit
        control.chmod(0o755)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKEGPU), str(REPO), str(REPO / "node-agent")])
    env["PATH"] = os.pathsep.join([str(FAKEGPU / "bin"), env.get("PATH", "")])
    env["FAKEGPU_STATE"] = str(tmp_path / "fakegpu-state")
    for key in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_VISIBLE_DEVICES"):
        env.pop(key, None)
    return env
