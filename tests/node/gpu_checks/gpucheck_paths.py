"""Paths of the GPU checks for their tests (a uniquely named module: `conftest` is ambiguous
between test directories)."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CHECKS_DIR = REPO / "node-agent" / "gpu-checks"
FAKEGPU = Path(__file__).resolve().parent / "fakegpu"
if str(CHECKS_DIR) not in sys.path:
    sys.path.insert(0, str(CHECKS_DIR))
