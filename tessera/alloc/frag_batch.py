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
from operator import attrgetter

import numpy as np

from tessera.alloc.assign import Assignment, one_gpu
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
    """`FragmentationMeasure._sum` for every row of `free` / `gpu_memory` (items x GPUs), as float64."""
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
    return frag


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
        "before_epoch", "before", "distinct", "no_placement", "uncapped", "free_cpu", "free_host_memory", "memo", "memo_epoch", "first",
        "packed", "host",
    )

    def __init__(self, node: NodeState) -> None:
        healthy = [g for g in node.gpus if g.healthy]
        self.version = node.version
        self.free_cpu = node.free_cpu_milli
        self.free_host_memory = node.free_memory_mib
        # the policy's memo of `_evaluate` results for this version (`_FragPolicyBase._memo`),
        # valid under the measure epoch `memo_epoch`
        self.memo: dict[int, Raw] = {}
        self.memo_epoch = -1
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
        self.first: list[bool] = []  # per position: the first GPU of its free value
        for k, (f, m) in enumerate(self.free):
            self.first.append((f, m) not in seen)
            if (f, m) not in seen:
                seen.add((f, m))
                self.distinct.append((k, f, m))
        # free milli, free memory and `first` in one array, made here (at the node's change) so
        # that a batch stacks hundreds of nodes in C (`_stack`)
        self.packed = np.array([*self.free_milli, *self.free_memory, *self.first], dtype=np.int64)
        # (usable GPUs, free CPU, free RAM): one row of a batch's host array, read in C (`_finish_shares`)
        self.host = (len(self.free_milli), self.free_cpu, self.free_host_memory)


_Pending = tuple[int, dict[int, Raw], int]  # (caller's position, memo, key)


class SimpleBatch:
    """The fragmentation policies' simple path (`_evaluate_simple`: one container, no model or
    co-location preference) for many nodes and one pod, picking each node's GPU exactly as the
    scalar path does (lowest index among equal rounded values).

    A share pod (the tail: a new share meets hundreds of nodes) is done in arrays end to end:
    the candidate GPUs of every node (the first GPU of each distinct free value with the share
    free) are found, changed, measured and chosen in numpy; Python touches each node once, to
    build its result. A whole-GPU pod (it fits few nodes at load) goes item by item through a
    `VectorBatch`."""

    def __init__(self, measure: FragmentationMeasure, pod: PodRequest) -> None:
        self._measure = measure
        self._pod = pod
        self._container = pod.gpu_containers[0]
        self._batch = VectorBatch()
        # whole-GPU pod: (pending, vector, item of `before` or -1, the item: the GPUs it takes)
        self._whole: list[tuple[_Pending, NodeVector, int, int, tuple[int, ...]]] = []
        # share pod: one entry per node in each list (parallel lists, not a tuple per node: at
        # hundreds of nodes each tracked tuple more adds to the young collections in a request)
        self._positions: list[int] = []
        self._memos: list[dict[int, Raw]] = []
        self._keys: list[int] = []
        self._vectors: list[NodeVector] = []
        self._failed: list[_Pending] = []

    def add(self, position: int, vector: NodeVector, memo: dict[int, Raw], key: int) -> None:
        """The node of `vector` (which passed `host_fit`) at `position` of the caller's list; its
        result goes into `memo[key]` too."""
        c, pod = self._container, self._pod
        if not c.whole:
            self._positions.append(position)
            self._memos.append(memo)
            self._keys.append(key)
            self._vectors.append(vector)
            return
        positions = [k for k, is_idle in enumerate(vector.idle) if is_idle][: c.gpu_count]
        if len(positions) < c.gpu_count:
            self._failed.append((position, memo, key))
            return
        batch = self._batch
        base = batch.base(vector.free_milli, vector.free_memory)
        item = batch.item(base, vector.models, vector.free_cpu - pod.cpu_milli, vector.free_host_memory - pod.memory_mib, [(k, (0, 0)) for k in positions])
        before = -1
        if vector.before_epoch != self._measure.epoch:
            before = batch.item(base, vector.models, vector.free_cpu, vector.free_host_memory)
        self._whole.append(((position, memo, key), vector, before, item, tuple(vector.indices[k] for k in positions)))

    def finish(self, results: list[Raw | None]) -> None:
        """The result of every node added: into `results[position]` and its memo."""
        for position, memo, key in self._failed:
            results[position] = memo[key] = FitFailure.GPU
        epoch = self._measure.epoch
        if self._whole:
            values = self._batch.values(self._measure)
            count = self._container.gpu_count
            for (position, memo, key), vector, before_item, item, taken in self._whole:
                if before_item >= 0:
                    vector.before = values[before_item]
                    vector.before_epoch = epoch
                results[position] = memo[key] = (values[item] - vector.before, (taken,), vector.idle_count - count)
        if self._vectors:
            self._finish_shares(results)

    def _finish_shares(self, results: list[Raw | None]) -> None:
        measure, pod, c = self._measure, self._pod, self._container
        vectors = self._vectors
        n = len(vectors)
        # per node (usable GPUs, free CPU, free RAM) and model set, gathered in C
        host = np.array(list(map(_HOST, vectors)), dtype=np.int64).reshape(n, 3)
        lengths, cpu, ram = host[:, 0], host[:, 1], host[:, 2]
        node_models = list(map(_MODELS, vectors))
        model_index = {models: i for i, models in enumerate(dict.fromkeys(node_models))}
        model_ids = np.fromiter(map(model_index.__getitem__, node_models), dtype=np.intp, count=n)
        width = max(1, int(lengths.max()))
        stacked = _stack(list(map(_PACKED, vectors)), lengths, width)
        free, gpu_memory, first = stacked[:, 0, :], stacked[:, 1, :], stacked[:, 2, :].astype(bool)
        valid = np.arange(width) < lengths[:, None]
        need_memory = c.gpu_memory_mib or 0
        rows, positions = np.nonzero(first & valid & (free >= c.gpu_milli) & (gpu_memory >= need_memory))
        items = len(rows)
        # the nodes whose fragmentation before is not known under this epoch, measured alongside
        unknown = [i for i, v in enumerate(vectors) if v.before_epoch != measure.epoch]
        take = np.concatenate([rows, np.array(unknown, dtype=np.intp)])
        item_free, item_memory = free[take], gpu_memory[take]
        changed = np.arange(items)
        item_free[changed, positions] -= c.gpu_milli
        item_memory[changed, positions] -= need_memory
        after = np.zeros(len(take), dtype=bool)
        after[:items] = True
        values = _expectation(
            measure, item_free, item_memory, valid[take],
            np.where(after, cpu[take] - pod.cpu_milli, cpu[take]), np.where(after, ram[take] - pod.memory_mib, ram[take]),
            model_ids[take], list(model_index),
        ) if len(take) else np.zeros(0)
        for i, value in zip(unknown, values[items:].tolist()):
            vectors[i].before = value
            vectors[i].before_epoch = measure.epoch
        chosen = _first_minimum(rows, values[:items], n)
        position_of = positions.tolist()
        for position, memo, key, vector, pick in zip(self._positions, self._memos, self._keys, vectors, chosen):
            if pick is None:
                results[position] = memo[key] = FitFailure.GPU
                continue
            item, best = pick
            k = position_of[item]
            results[position] = memo[key] = (best - vector.before, one_gpu(vector.indices[k]), vector.idle_count - (1 if vector.idle[k] else 0))


_HOST = attrgetter("host")
_MODELS = attrgetter("models")
_PACKED = attrgetter("packed")


def _stack(packed: Sequence[np.ndarray], lengths: np.ndarray, width: int) -> np.ndarray:
    """The `NodeVector.packed` arrays (free milli, free memory, first; `lengths` GPUs each) as
    an (nodes x 3 x width) int64 array, short nodes padded with 0."""
    n = len(packed)
    flat = np.concatenate(packed) if n else np.zeros(0, dtype=np.int64)
    if n and int(lengths.min()) == width:
        return flat.reshape(n, 3, width)
    out = np.zeros((n, 3, width), dtype=np.int64)
    sizes = 3 * lengths
    starts = np.cumsum(sizes) - sizes
    at = np.arange(len(flat)) - np.repeat(starts, sizes)
    gpus = np.repeat(lengths, sizes)
    out[np.repeat(np.arange(n), sizes), at // np.maximum(gpus, 1), at % np.maximum(gpus, 1)] = flat
    return out


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


def _first_minimum(rows: np.ndarray, values: np.ndarray, count: int) -> list[tuple[int, float] | None]:
    """Per row 0..count-1, (item, value rounded to 6 decimals) of its lowest rounded value, the
    earliest item on a tie (the scalar loop's strict `<` over `round(value, 6)`); None for a row
    without items. `rows` is sorted (np.nonzero's row-major order) and gives each item's row."""
    out: list[tuple[int, float] | None] = [None] * count
    if not len(values):
        return out
    rounded = round6(values)
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    lowest = np.minimum.reduceat(rounded, starts)
    segment = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(rows)]))
    at_lowest = np.flatnonzero(rounded == lowest[segment])
    # the earliest item at the lowest value of each row: the first of its row among `at_lowest`
    rows_at = segment[at_lowest]
    first = at_lowest[np.r_[True, rows_at[1:] != rows_at[:-1]]]
    for item, row, value in zip(first.tolist(), rows[first].tolist(), rounded[first].tolist()):
        out[row] = (item, value)
    return out
