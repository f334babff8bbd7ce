"""`FragmentationMeasure.of` for many GPU vectors in one pass, bit for bit the scalar value.

Why: a pod shape the extender has not seen on a node costs one fragmentation evaluation per
candidate node, and most of a scalar evaluation is Python bookkeeping around a handful of
additions. When a new shape meets 500 candidate nodes (kube-scheduler's sample at 5,000 nodes
and more) that was 20-40 ms, the whole tail of the scale curve (docs/benchmarks.md). Here the
vectors of every candidate are evaluated together with numpy.

Exact, not approximate: the simulator replays one node at a time through the scalar path while
the extender answers in batches, and a last-digit difference can move a pod, so both must give
the same float. The per-demand counts are integers (exact in any order), and the expectation
is added row by row in the shapes' order, one float64 multiply and one add per row, which are
the IEEE operations the scalar `_sum` performs in the same order (numpy's pairwise `sum` would
round differently and is not used for it). `tests/tessera/alloc/test_frag_batch.py` compares
the two on random states.
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

from tessera.alloc.assign import Assignment
from tessera.alloc.fragmentation import FragmentationMeasure, GpuFree
from tessera.alloc.model import FitFailure, NodeState, PodRequest

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

    def one_change_each(self, base: int, models: frozenset[str], free_cpu: int, free_memory: int, changes: Sequence[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """One item per change (position, new free milli, new free memory) of `base`, as
        `item(base, ..., [change])` each; returns (position, item) pairs."""
        first = len(self._base)
        found = self._model_sets.get(models)
        if found is None:
            found = self._model_sets[models] = len(self._model_sets)
        count = len(changes)
        self._base += [base] * count
        self._cpu += [free_cpu] * count
        self._ram += [free_memory] * count
        self._models += [found] * count
        out = []
        changed = self._changed
        for i, (position, f, m) in enumerate(changes):
            changed += (first + i, position, f, m)
            out.append((position, first + i))
        return out

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
        return _expectation(measure, free, gpu_memory, valid, self._cpu, self._ram, self._models, list(self._model_sets))


def _expectation(
    measure: FragmentationMeasure,
    free: np.ndarray,
    gpu_memory: np.ndarray,
    valid: np.ndarray,
    cpu: list[int],
    ram: list[int],
    model_ids: list[int],
    model_list: list[frozenset[str]],
) -> list[float]:
    """`FragmentationMeasure._sum` for every row of `free` / `gpu_memory` (items x GPUs)."""
    tables = _tables(measure)
    idle = np.where(valid, free, 0).sum(axis=1)
    # (stranded milli, GPUs that fit) per demand and item, as `FragmentationMeasure._counts`
    fits = (free[None, :, :] >= tables.milli[:, None, None]) & (gpu_memory[None, :, :] >= tables.gpu_memory[:, None, None]) & valid[None, :, :]
    fitting = fits.sum(axis=2)
    stranded = idle[None, :] - np.where(fits, free[None, :, :], 0).sum(axis=2)
    # per shape (rows, in the shapes' order) and item: can the node host the shape at all, and
    # does it have enough GPUs with the shape's share free
    hostable = (np.array(cpu, dtype=np.int64)[None, :] >= tables.cpu[:, None]) & (np.array(ram, dtype=np.int64)[None, :] >= tables.memory[:, None])
    if tables.limited:
        allowed = np.array([[s.models is None or bool(s.models & m) for m in model_list] for s in measure._shapes], dtype=bool)
        hostable &= allowed[:, np.array(model_ids, dtype=np.intp)]
    hostable &= tables.gpu_shape[:, None]
    enough = hostable & (fitting[tables.demand] >= tables.count[:, None])
    counted = np.where(enough, stranded[tables.demand], idle[None, :])
    # one multiply and one add per row, in order: what the scalar loop does (np.sum would not)
    frag = np.add.accumulate(tables.weight[:, None] * counted, axis=0)[-1]
    frag[idle == 0] = 0.0
    return frag.tolist()  # type: ignore[no-any-return]


class _Tables:
    """The measure's shapes and demands as arrays (built once per measure)."""

    def __init__(self, measure: FragmentationMeasure) -> None:
        shapes = measure._shapes
        self.milli = np.array([m for m, _ in measure._demands], dtype=np.int64)
        self.gpu_memory = np.array([g for _, g in measure._demands], dtype=np.int64)
        self.weight = np.array([s.weight for s in shapes], dtype=np.float64)
        self.count = np.array([s.count for s in shapes], dtype=np.int64)
        self.cpu = np.array([s.cpu for s in shapes], dtype=np.int64)
        self.memory = np.array([s.memory for s in shapes], dtype=np.int64)
        self.gpu_shape = np.array([s.count > 0 for s in shapes], dtype=bool)
        self.demand = np.array([measure._demand_of[(s.milli, s.gpu_memory)] for s in shapes], dtype=np.intp)
        self.limited = any(s.models is not None for s in shapes)


def _tables(measure: FragmentationMeasure) -> _Tables:
    tables = measure.__dict__.get("_batch_tables")
    if tables is None:
        tables = measure.__dict__["_batch_tables"] = _Tables(measure)
    return tables  # type: ignore[no-any-return]


def measure_many(measure: FragmentationMeasure, items: Sequence[tuple[frozenset[str], int, int, Sequence[GpuFree]]]) -> list[float]:
    """`[measure.of(*item) for item in items]`, computed together (not memoised)."""
    batch = VectorBatch()
    for models, free_cpu, free_memory, gpus in items:
        batch.item(batch.base([f for f, _ in gpus], [m for _, m in gpus]), models, free_cpu, free_memory)
    return batch.values(measure)


class NodeVector:
    """What the simple path reads of one version of a node, computed once per version."""

    __slots__ = (
        "version", "indices", "free", "free_milli", "free_memory", "free_total", "idle", "models", "idle_count", "offline",
        "before_epoch", "before", "distinct", "no_placement", "uncapped",
    )

    def __init__(self, node: NodeState) -> None:
        healthy = [g for g in node.gpus if g.healthy]
        self.version = node.version
        self.indices = [g.index for g in healthy]
        self.free: list[GpuFree] = [(g.free_milli, g.free_memory_mib) for g in healthy]
        self.free_milli = [f for f, _ in self.free]
        self.free_memory = [m for _, m in self.free]
        self.free_total = sum(self.free_milli)
        self.idle = [g.idle for g in healthy]
        self.models = node.models
        self.idle_count = sum(self.idle)
        self.offline = any(g.offline_milli for g in node.gpus)
        # read from the labels once per version (a label change makes a new version)
        self.no_placement = node.gpu_placement is None
        self.uncapped = node.max_shares_per_gpu is None
        self.before_epoch = -1  # the measure epoch `before` was computed under; -1: not yet
        self.before = 0.0  # the node's fragmentation as it is
        # (position, free milli, free memory) of the first GPU of each distinct free value: the
        # candidates for a share (GPUs in the same state are interchangeable; the lowest index wins)
        seen: set[GpuFree] = set()
        self.distinct: list[tuple[int, int, int]] = []
        for k, (f, m) in enumerate(self.free):
            if (f, m) not in seen:
                seen.add((f, m))
                self.distinct.append((k, f, m))


class SimpleBatch:
    """The fragmentation policies' simple path (`_evaluate_simple`: one container, no model or
    co-location preference) for many nodes and one pod: every candidate GPU of every node is an
    item of one `VectorBatch`, and `finish` picks each node's GPU exactly as the scalar path
    does (lowest index among equal rounded values)."""

    def __init__(self, measure: FragmentationMeasure, pod: PodRequest) -> None:
        self._measure = measure
        self._pod = pod
        self._container = pod.gpu_containers[0]
        self._batch = VectorBatch()
        # (position, memo, key, vector, item of `before` or -1, (GPU position, item) pairs: the
        # candidates of a share, or the GPUs a whole-GPU pod takes, all with its one item)
        self._nodes: list[tuple[int, dict[tuple[object, ...], Raw], tuple[object, ...], NodeVector, int, list[tuple[int, int]]]] = []
        self._failed: list[tuple[int, dict[tuple[object, ...], Raw], tuple[object, ...]]] = []

    def add(self, position: int, node: NodeState, vector: NodeVector, memo: dict[tuple[object, ...], Raw], key: tuple[object, ...]) -> None:
        """`node` (which passed `host_fit`) at `position` of the caller's list; its result goes
        into `memo[key]` too."""
        c, pod, batch = self._container, self._pod, self._batch
        candidates: list[tuple[int, int]] = []
        base = -1
        cpu_after = node.free_cpu_milli - pod.cpu_milli
        memory_after = node.free_memory_mib - pod.memory_mib
        if c.whole:
            positions = [k for k, is_idle in enumerate(vector.idle) if is_idle][: c.gpu_count]
            if len(positions) < c.gpu_count:
                self._failed.append((position, memo, key))
                return
            base = batch.base(vector.free_milli, vector.free_memory)
            item = batch.item(base, vector.models, cpu_after, memory_after, [(k, (0, 0)) for k in positions])
            candidates = [(k, item) for k in positions]  # one item: every GPU the pod takes
        else:
            milli, need_memory = c.gpu_milli, c.gpu_memory_mib or 0
            fitting = [(k, f - milli, m - need_memory) for k, f, m in vector.distinct if f >= milli and m >= need_memory]
            if fitting:
                base = batch.base(vector.free_milli, vector.free_memory)
                candidates = batch.one_change_each(base, vector.models, cpu_after, memory_after, fitting)
            if not candidates:
                self._failed.append((position, memo, key))
                return
        before = -1
        if vector.before_epoch != self._measure.epoch:
            before = batch.item(base, vector.models, node.free_cpu_milli, node.free_memory_mib)
        self._nodes.append((position, memo, key, vector, before, candidates))

    def finish(self) -> list[tuple[int, dict[tuple[object, ...], Raw], tuple[object, ...], Raw]]:
        """(position, memo, key, result) for every node added."""
        out: list[tuple[int, dict[tuple[object, ...], Raw], tuple[object, ...], Raw]] = [
            (position, memo, key, FitFailure.GPU) for position, memo, key in self._failed
        ]
        values = self._batch.values(self._measure)
        epoch = self._measure.epoch
        c = self._container
        for position, memo, key, vector, before_item, candidates in self._nodes:
            if before_item >= 0:
                vector.before = values[before_item]
                vector.before_epoch = epoch
            before = vector.before
            if c.whole:
                taken = tuple(vector.indices[k] for k, _ in candidates)
                raw: Raw = (values[candidates[0][1]] - before, (taken,), vector.idle_count - c.gpu_count)
            else:
                k, best = candidates[0][0], round(values[candidates[0][1]], 6)
                for candidate, item in candidates[1:]:
                    value = round(values[item], 6)
                    if value < best:  # strict: the lowest index wins a tie
                        k, best = candidate, value
                raw = (best - before, ((vector.indices[k],),), vector.idle_count - (1 if vector.idle[k] else 0))
            out.append((position, memo, key, raw))
        return out
