"""GPU checks of the Tessera node agent: real CUDA work on a real NVIDIA GPU, through production code.

    bash node-agent/gpu-checks/run-on-gpu.sh          # on a lent GPU machine: deps, checks, report
    python node-agent/gpu-checks/run_gpu_checks.py [--only nvml,mps,...] [--seconds 10] [--output r.json]

Checks (details and targets: docs/node-agent.md, "GPU checks"): nvml, overhead (S6), mps (S3
fixed-share 60/30 -> 2.0 +- 0.2), besteffort (S3), memory (agent kill + MPS pinned limit),
colocation (S4, >= 95 % kept), burst (burst-share). Where something is missing (no GPU, driver,
PyTorch, pynvml, MPS binary) a check reports "skipped" with the reason; exit 2 when nothing ran.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent, HERE.parent.parent):  # gpucheck, tessera_node, tessera
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from gpucheck.cli import main  # noqa: E402 - after the path setup

if __name__ == "__main__":
    main()
