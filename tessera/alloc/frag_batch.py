"""`FragmentationMeasure.of` for many GPU vectors in one pass, bit for bit the scalar value.

Why: a pod shape the extender has not seen on a node costs one fragmentation evaluation per
candidate node, and most of a scalar evaluation is Python bookkeeping around a handful of
additions. When a new shape meets 500 candidate nodes (kube-scheduler's sample at 5,000 nodes
and more) that is 20-40 ms done node by node, the whole tail of the scale curve (docs/benchmarks.md). Here the
vectors of every candidate are evaluated together with numpy.

Exact, not approximate: the simulator replays one node at a time through the scalar path while
the extender answers in batches, and a last-digit difference can move a pod, so both must give
the same float. The per-demand counts are integers (exact in any order), and the expectation
is added row by row in the shapes' order, one float64 multiply and one add per row, which are
the IEEE operations the scalar `FragmentationMeasure.of` performs in the same order (numpy's pairwise `sum` would
round differently and is not used for it). `tests/tessera/alloc/test_frag_batch.py` compares
the two on random states.

Also here, as exact array forms of the scalar path's steps: the per-node choice among rounded
values (`round6`, `first_minimum`) and FGD's sigmoid score (`sigmoid_scores`). The batch over
nodes that uses them is `frag_simple`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain

import numpy as np

from tessera.alloc.assign import Assignment
from tessera.alloc.fragmentation import FragmentationMeasure, GpuFree
from tessera.alloc.model import MILLI_PER_GPU, FitFailure

Raw = tuple[float, Assignment, int] | FitFailure  # (fragmentation increase, GPUs, idle GPUs left)


class VectorBatch:
    """GPU vectors to measure together: base vectors (a node's GPUs as they are) and items, each
    a base with some GPUs changed, under a node's models and free CPU/RAM. Building costs a few
    list appends per item; `values` does the arithmetic in numpy."""

    def __init__(self) -> None:
        self._free: list[Sequence[int]] = []
        self._memory: list[Sequence[int]] = []
        self._base: list[int] = []
        self._cpu: list[int] = []
        self._ram: list[int] = []
        self._models: list[int] = []
        self._model_sets: dict[frozenset[str], int] = {}
        self._changed: list[int] = []  # item, position, free milli, free memory: four per change

    def __len__(self) -> int:
        return len(self._base)

    def base(self, free: Sequence[int], memory: Sequence[int]) -> int:
        """A node's GPU vector (free milli, free memory MiB per usable GPU); returns its id."""
        self._free.append(free)
        self._memory.append(memory)
        return len(self._free) - 1

    def item(self, base: int, models: frozenset[str], free_cpu: int, free_memory: int, changes: Sequence[tuple[int, GpuFree]] = ()) -> int:
        """`base` with `changes` ((position, new free value) each), measured at `free_cpu` /
        `free_memory` for a node of `models`; returns the item's position in `values`."""
        item = len(self._base)
        self._base.append(base)
        self._cpu.append(free_cpu)
        self._ram.append(free_memory)
        found = self._model_sets.get(models)
        if found is None:
            found = self._model_sets[models] = len(self._model_sets)
        self._models.append(found)
        for position, (f, m) in changes:
            self._changed += (item, position, f, m)
        return item

    def values(self, measure: FragmentationMeasure) -> list[float]:
        """The measure of every item, in the order they were added; each equals `measure.of`."""
        if not self._base:
            return []
        lengths = [len(v) for v in self._free]
        width = max(1, max(lengths))
        if min(lengths) < width:
            pad = [0] * width
            free_rows: Sequence[Sequence[int]] = [[*v, *pad[len(v) :]] for v in self._free]
            memory_rows: Sequence[Sequence[int]] = [[*v, *pad[len(v) :]] for v in self._memory]
        else:
            free_rows, memory_rows = self._free, self._memory
        bases = len(free_rows)
        base = np.array(self._base, dtype=np.intp)
        free = np.fromiter(chain.from_iterable(free_rows), dtype=np.int64, count=bases * width).reshape(bases, width)[base]
        gpu_memory = np.fromiter(chain.from_iterable(memory_rows), dtype=np.int64, count=bases * width).reshape(bases, width)[base]
        valid = (np.arange(width) < np.array(lengths, dtype=np.int64)[:, None])[base]
        if self._changed:
            changed = np.array(self._changed, dtype=np.int64).reshape(-1, 4)
            free[changed[:, 0], changed[:, 1]] = changed[:, 2]
            gpu_memory[changed[:, 0], changed[:, 1]] = changed[:, 3]
        return _expectation(measure, free, gpu_memory, valid, self._cpu, self._ram, self._models, list(self._model_sets)).tolist()  # type: ignore[no-any-return]


def _expectation(
    measure: FragmentationMeasure,
    free: np.ndarray,
    gpu_memory: np.ndarray,
    valid: np.ndarray,
    cpu: Sequence[int] | np.ndarray,
    ram: Sequence[int] | np.ndarray,
    model_ids: Sequence[int] | np.ndarray,
    model_list: list[frozenset[str]],
) -> np.ndarray:
    """`FragmentationMeasure.of` (not memoised) for every row of `free` / `gpu_memory` (items x GPUs), as float64."""
    fitting, fitting_free, idle = demand_counts(measure, free, gpu_memory, valid)
    return shape_sum(measure, fitting, idle - fitting_free, idle, cpu, ram, model_ids, model_list)


def demand_counts(measure: FragmentationMeasure, free: np.ndarray, gpu_memory: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per demand and row (demands x rows): how many GPUs fit the demand and their free milli
    summed, and per row the free milli of all its GPUs (the integers the scalar
    measure counts: what is stranded for a demand is the row's free milli less what fits)."""
    tables = measure.arrays
    fits = (free[None, :, :] >= tables.milli[:, None, None]) & (gpu_memory[None, :, :] >= tables.gpu_memory[:, None, None]) & valid[None, :, :]
    # count_nonzero and einsum reduce the short GPU axis in one pass each (sum over an axis of 8
    # goes element by element): a third less time at 300 nodes, the same integers
    return np.count_nonzero(fits, axis=2), np.einsum("drg,rg->dr", fits, free), np.where(valid, free, 0).sum(axis=1)


def fits_each(measure: FragmentationMeasure, free: np.ndarray, gpu_memory: np.ndarray) -> np.ndarray:
    """Per demand and GPU (demands x GPUs): does one GPU of this free milli and memory fit it."""
    tables = measure.arrays
    return (free[None, :] >= tables.milli[:, None]) & (gpu_memory[None, :] >= tables.gpu_memory[:, None])


def shape_sum(
    measure: FragmentationMeasure,
    fitting: np.ndarray,
    stranded: np.ndarray,
    idle: np.ndarray,
    cpu: Sequence[int] | np.ndarray,
    ram: Sequence[int] | np.ndarray,
    model_ids: Sequence[int] | np.ndarray,
    model_list: list[frozenset[str]],
) -> np.ndarray:
    """The expectation over the mix's shapes from the per-demand counts (`demand_counts`), per
    item: what `FragmentationMeasure.of` adds, shape by shape in its order."""
    tables = measure.arrays
    # per shape (rows, in the shapes' order) and item: can the node host the shape at all, and
    # does it have enough GPUs with the shape's share free
    hostable = (np.array(cpu, dtype=np.int64)[None, :] >= tables.cpu[:, None]) & (np.array(ram, dtype=np.int64)[None, :] >= tables.memory[:, None])
    if tables.limited:
        allowed = np.array([[s.models is None or bool(s.models & m) for m in model_list] for s in measure.shapes], dtype=bool)
        hostable &= allowed[:, np.array(model_ids, dtype=np.intp)]
    hostable &= tables.gpu_shape[:, None]
    enough = hostable & (fitting[tables.demand] >= tables.count[:, None])
    counted = np.where(enough, stranded[tables.demand], idle[None, :])
    # one multiply and one add per row, in order: what the scalar loop does (np.sum would not)
    frag = np.add.accumulate(tables.weight[:, None] * counted, axis=0)[-1]
    frag[idle == 0] = 0.0
    return frag


def measure_many(measure: FragmentationMeasure, items: Sequence[tuple[frozenset[str], int, int, Sequence[GpuFree]]]) -> list[float]:
    """`[measure.of(*item) for item in items]`, computed together (not memoised)."""
    batch = VectorBatch()
    for models, free_cpu, free_memory, gpus in items:
        batch.item(batch.base([f for f, _ in gpus], [m for _, m in gpus]), models, free_cpu, free_memory)
    return batch.values(measure)


def round6(values: np.ndarray) -> np.ndarray:
    """`round(value, 6)` of each value, bit for bit what Python's `round` gives.

    Python rounds the exact binary value half to even at the sixth decimal and returns the double
    nearest to that decimal; `rint(value * 1e6) / 1e6` returns the same double (the division by
    an exact 1e6 is correctly rounded) whenever the product's own rounding cannot move it across a
    half: only products within a few ulps of a half are rounded again, in Python. That is about
    one value in a million, against ~1 us per Python `round` for each of hundreds of candidates."""
    scaled = values * 1e6
    out = np.rint(scaled) / 1e6
    near_half = np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) <= 4 * np.spacing(np.abs(scaled))
    for i in np.flatnonzero(near_half).tolist():
        out[i] = round(float(values[i]), 6)
    return out


def first_minimum(rows: np.ndarray, positions: np.ndarray, values: np.ndarray, count: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, position, value rounded to 6 decimals) of each row's lowest rounded value, the
    lowest position on a tie (the scalar loop's strict `<` over `round(value, 6)`, which meets a
    node's candidates in position order), for the rows of 0..count-1 that have items, in row
    order. Item i is at (`rows[i]`, `positions[i]`), each place at most once, positions < width."""
    grid = np.full((count, width), np.inf)
    grid[rows, positions] = round6(values)
    lowest = grid.argmin(axis=1)  # the first of equal minima: the lowest position
    best = grid[np.arange(count), lowest]
    picked = np.flatnonzero(best != np.inf)
    return picked, lowest[picked], best[picked]


def sigmoid_score(increase: float, scale: float = 100.0) -> int:
    """FGD's node score: 0..scale, scale / 2 for no change, lower as fragmentation grows."""
    x = -increase / MILLI_PER_GPU
    return int(scale / (1.0 + math.exp(-x))) if x > -700 else 0


_vector_exp = np.exp  # a seam: tests put an exp a few ulps off here, as some CPUs' vector exp is


def sigmoid_scores(increases: np.ndarray, scale: float = 100.0) -> np.ndarray:
    """`float(sigmoid_score(increase, scale))` of each increase, bit for bit.

    numpy's `exp` may differ from the C library's (which `math.exp` calls) in the last bit, and
    that moves `int(...)` only when the quotient lies within a few ulps of an integer: those
    (no change gives exactly scale / 2, a large decrease exactly scale) are scored by
    `sigmoid_score` itself."""
    x = -increases / MILLI_PER_GPU
    with np.errstate(over="ignore"):
        quotient = scale / (1.0 + _vector_exp(-x))
    out = np.floor(quotient)  # int() of a non-negative quotient
    out[x <= -700] = 0.0
    for i in np.flatnonzero(np.abs(quotient - np.rint(quotient)) <= 1e-9 * np.maximum(quotient, 1.0)).tolist():
        out[i] = float(sigmoid_score(float(increases[i]), scale))
    return out
