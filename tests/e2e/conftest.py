"""End-to-end scenario fixtures. The harness lives in `e2e_cluster.py`, `e2e_parts.py` and `e2e_stack.py` (uniquely
named modules); the kube-scheduler emulator is the scheduler tests' own, reused as is."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tessera" / "scheduler"))
