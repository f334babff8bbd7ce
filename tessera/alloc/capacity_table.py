"""Every node's `Capacity` in arrays, so that the certain rejections of one pod over thousands of
candidate nodes are one numpy pass instead of a Python loop.

Why: a pod shape the extender has no view for (`scheduler.evaluation_views`) walks every
candidate node. At 90 % load most of them are rejected on their `Capacity` alone (a whole-GPU pod
fits a few dozen of 1213 openb nodes), and doing so node by node costs 2 ms with the nodes' objects
in the CPU cache and 6-7 ms without (node, summary and result dicts scattered over a heap of
millions of objects), the floor under every such request at 1213 nodes (docs/benchmarks.md).

Rows are written when a node changes (`EvaluationCache.prepare`, called by `Cluster` on every
change), so they describe the node's current version. A node never prepared, or forgotten, has
no current row: it is answered `UNDECIDED` and goes the per-node way, which checks versions. A
forgotten node's row is given to the next new node, so the arrays are as long as the most nodes
the inventory held at once, however many come and go over a cluster's life.

A row also keeps the node's interned state (`EvaluationCache._intern`), so that the nodes that
pass are looked up in the by-state cache straight from the array, without a walk over their
objects (at 5,000 nodes a pod shape new to hundreds of candidates would pay ~8 us per node for that
walk, docs/benchmarks.md).
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np

from tessera.alloc.assign import Capacity, Demand

PASS, CPU, MEMORY, GPU, UNDECIDED = 0, 1, 2, 3, 4
"""`lookup`'s codes: no certain failure, `Demand.reject`'s three answers, and no current row."""

_FIELDS = ("cpu", "memory", "idle", "max_milli", "max_memory", "share_room", "state", "current")


class CapacityTable:
    def __init__(self, size: int = 1024) -> None:
        self._row: dict[str, int] = {}
        self._free: list[int] = []  # rows of forgotten nodes
        self._cpu = np.zeros(size, dtype=np.int64)
        self._memory = np.zeros(size, dtype=np.int64)
        self._idle = np.zeros(size, dtype=np.int64)
        self._max_milli = np.zeros(size, dtype=np.int64)
        self._max_memory = np.zeros(size, dtype=np.int64)
        self._share_room = np.zeros(size, dtype=bool)
        self._state = np.full(size, -1, dtype=np.int64)
        self._current = np.zeros(size, dtype=bool)

    def set(self, name: str, capacity: Capacity, state: int = -1) -> None:
        """`name`'s current capacity and interned state (-1: not known)."""
        row = self._row.get(name)
        if row is None:
            row = self._row[name] = self._free.pop() if self._free else len(self._row)
            if row >= len(self._cpu):
                self._grow()
        self._cpu[row] = capacity.free_cpu_milli
        self._memory[row] = capacity.free_memory_mib
        self._idle[row] = capacity.idle_gpus
        self._max_milli[row] = capacity.max_free_milli
        self._max_memory[row] = capacity.max_free_memory_mib
        self._share_room[row] = capacity.share_room
        self._state[row] = state
        self._current[row] = True

    def forget(self, name: str) -> None:
        """`name` has no current row until `set` again."""
        row = self._row.pop(name, None)
        if row is not None:
            self._current[row] = False
            self._free.append(row)

    def clear(self) -> None:
        self._current[:] = False

    def lookup(self, names: Sequence[str], demand: Demand) -> tuple[np.ndarray, np.ndarray]:
        """Per name, in order: `Demand.reject`'s answer as a code (`PASS` where it has none),
        `UNDECIDED` without a current row; and the interned state of its current row (-1 where
        it has none or its state was not given). `demand` must not name GPU models (the model
        test needs each node's model set)."""
        assert demand.models is None
        rows = np.fromiter(map(self._row.get, names, repeat(-1)), dtype=np.intp, count=len(names))
        known = rows >= 0
        rows = np.where(known, rows, 0)
        gpu = demand.whole_gpus > self._idle[rows]
        if demand.share_milli:
            gpu |= (demand.share_milli > self._max_milli[rows]) | (demand.share_memory_mib > self._max_memory[rows]) | ~self._share_room[rows]
        # the order of Demand.reject: CPU, then memory, then the GPUs
        code = np.where(gpu, GPU, PASS)
        code = np.where(self._memory[rows] < demand.memory_mib, MEMORY, code)
        code = np.where(self._cpu[rows] < demand.cpu_milli, CPU, code)
        current = known & self._current[rows]
        return np.where(current, code, UNDECIDED), np.where(current, self._state[rows], -1)

    def _grow(self) -> None:
        for field in _FIELDS:
            old = getattr(self, "_" + field)
            new = np.full(2 * len(old), -1 if field == "state" else 0, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, "_" + field, new)
