"""FGD's fragmentation measure, generalised, with memoisation.

For one node and one typical pod shape t (FGD, USENIX ATC'23, section 4): if the node cannot host
t at all (model, CPU, not enough GPUs with t's share free) every idle milli-GPU on the node is
fragment for t; otherwise the fragment is the idle compute on GPUs that individually cannot take
t's share. The node's fragmentation is the expectation over the workload mix. Tessera's
generalisation adds GPU memory (a GPU with the compute but not the memory is fragment) and host
memory (a node without the RAM cannot host t); `faithful=True` turns both off, as in the paper.

The value depends only on (GPU models, a bucket of free CPU/RAM, the multiset of per-GPU free
capacity), so it is memoised on that key: in a 1213-node cluster most nodes share a few states.
The memo and the shape rows compiled per (models, buckets) are bounded together in entries and in
bytes (`max_bytes`, estimated as entries are added: `MEMO_BYTES`, `ROWS_BYTES`); past either
bound both start again empty, and nothing but speed depends on what they remember.

`HostDemand` is the second measure the fragmentation-aware policy adds: FGD asks only whether the
node can host *one* more pod of each shape, so it cannot see a node whose CPU or RAM will run out
long before its GPUs do. `HostDemand.unfed` counts the GPU compute a node's free CPU and RAM
cannot feed at the CPU and RAM the mix's GPU pods ask per GPU.
"""
from __future__ import annotations

import sys
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from tessera.alloc.model import MILLI_PER_GPU
from tessera.alloc.workload import MixSnapshot

GpuFree = tuple[int, int]  # (free milli, free memory MiB) of one usable GPU
_MEMO_LIMIT = 500_000  # entries; the memo is dropped when it grows past this (bounded memory)
MiB: Final = 1024 * 1024
MEASURE_BUDGET: Final = 64 * MiB
"""Default byte budget of one measure's memo and compiled rows together: ~46,000 values of
8-GPU nodes (the openb replays hold at most ~5,200 values, the 5,000-node extender of
bench/scale.py ~7,900)."""

MEMO_BYTES: Final = 200
MEMO_GPU_BYTES: Final = 130
"""Estimated bytes of one memoised value: `MEMO_BYTES` (the dict slot, the float, the key's
outer tuple, its bucket ints and its GPU tuple's header), the key's set of GPU models
(`sys.getsizeof`: a node's `models` is a new set each time it is read, 216 bytes for up to four
models), and `MEMO_GPU_BYTES` per GPU of the node (the GPU tuple's pointer and a (free milli,
free memory) pair with its two ints, as if none were shared with the node's vector). Measured
with tracemalloc, every pair and set new: 468, 532 and 916 bytes per value of 1, 2 and 8 GPUs
(one model), against 546, 676 and 1,456 estimated."""
ROWS_BYTES: Final = 300
ROW_BYTES: Final = 80
"""Estimated bytes of one compiled entry (`_rows`, per models and CPU/RAM buckets): `ROWS_BYTES`
(slot, key, the used-demands tuple), the key's set of models, and `ROW_BYTES` per shape of the
mix (a (weight, count, demand) tuple and its pointer). Measured with tracemalloc under a mix of
200 shapes: 15,327 bytes per new value with its new rows, against 17,062 estimated."""
_Row = tuple[float, int, int]  # (weight, GPU count, demand index or -1: the node cannot host the shape)
_Counts = tuple[int, int]  # (stranded milli, GPUs that fit) of one vector for one demand


@dataclass(frozen=True)
class MeasuredShape:
    """One shape of the mix as the measure reads it (its weight normalised over the mix)."""

    count: int
    milli: int
    gpu_memory: int  # 0 = no GPU memory condition
    cpu: int
    memory: int  # 0 = no host memory condition
    models: frozenset[str] | None
    weight: float


@dataclass(frozen=True)
class HostDemand:
    """What the mix's GPU pods ask of the host per milli-GPU: CPU milli and RAM MiB, averaged
    over the pods (by pod count; multi-GPU pods count their GPUs in the denominator)."""

    cpu_per_milli: float
    memory_per_milli: float

    @staticmethod
    def of(snapshot: MixSnapshot) -> HostDemand:
        gpu = [s for s in snapshot.shapes if s.gpu_count > 0]
        milli = sum(s.weight * s.gpu_count * s.gpu_milli for s in gpu)
        if milli <= 0:
            return HostDemand(0.0, 0.0)
        return HostDemand(sum(s.weight * s.cpu_milli for s in gpu) / milli, sum(s.weight * s.memory_mib for s in gpu) / milli)

    def unfed(self, free_gpu_milli: int, free_cpu: int, free_memory: int) -> float:
        """Free GPU compute (milli) beyond what the free CPU and RAM can serve at the mix's
        ratios: a node whose CPU is gone strands its GPUs however well they are packed.
        An unaccounted resource (`UNTRACKED`) never strands anything."""
        feed = float(free_gpu_milli)
        if self.cpu_per_milli > 0:
            feed = min(feed, max(free_cpu, 0) / self.cpu_per_milli)
        if self.memory_per_milli > 0:
            feed = min(feed, max(free_memory, 0) / self.memory_per_milli)
        return free_gpu_milli - feed

    def unfed_increase_many(
        self,
        free_gpu_milli: Sequence[int] | np.ndarray,
        free_cpu: Sequence[int] | np.ndarray,
        free_memory: Sequence[int] | np.ndarray,
        gpu_milli: int,
        cpu: int,
        memory: int,
    ) -> np.ndarray:
        """`unfed(g - gpu_milli, c - cpu, m - memory) - unfed(g, c, m)` for every (g, c, m),
        computed together as float64; bit for bit the scalar values (the same IEEE operations,
        element by element: int to float64, divide, min, subtract)."""
        gpus = np.array(free_gpu_milli, dtype=np.int64)
        cpus = np.array(free_cpu, dtype=np.int64)
        memories = np.array(free_memory, dtype=np.int64)
        after = self._unfed_array(gpus - gpu_milli, cpus - cpu, memories - memory)
        return after - self._unfed_array(gpus, cpus, memories)

    def _unfed_array(self, gpus: np.ndarray, cpus: np.ndarray, memories: np.ndarray) -> np.ndarray:
        feed = gpus.astype(np.float64)
        if self.cpu_per_milli > 0:
            feed = np.minimum(feed, np.maximum(cpus, 0) / self.cpu_per_milli)
        if self.memory_per_milli > 0:
            feed = np.minimum(feed, np.maximum(memories, 0) / self.memory_per_milli)
        return gpus - feed


class ShapeArrays:
    """The measure's shapes and demands as arrays, for the batch forms of the measure
    (`frag_batch`); built once per measure, on first use."""

    __slots__ = ("milli", "gpu_memory", "weight", "count", "cpu", "memory", "gpu_shape", "demand", "limited")

    def __init__(self, shapes: Sequence[MeasuredShape], demands: Sequence[tuple[int, int]]) -> None:
        demand_of = {demand: i for i, demand in enumerate(demands)}
        self.milli = np.array([m for m, _ in demands], dtype=np.int64)
        self.gpu_memory = np.array([g for _, g in demands], dtype=np.int64)
        self.weight = np.array([s.weight for s in shapes], dtype=np.float64)
        self.count = np.array([s.count for s in shapes], dtype=np.int64)
        self.cpu = np.array([s.cpu for s in shapes], dtype=np.int64)
        self.memory = np.array([s.memory for s in shapes], dtype=np.int64)
        self.gpu_shape = np.array([s.count > 0 for s in shapes], dtype=bool)
        self.demand = np.array([demand_of[(s.milli, s.gpu_memory)] for s in shapes], dtype=np.intp)
        self.limited = any(s.models is not None for s in shapes)


class FragmentationMeasure:
    """Expected fragmented milli-GPUs of a node state under one mix snapshot."""

    def __init__(
        self,
        snapshot: MixSnapshot,
        *,
        faithful: bool = False,
        weighting: str = "pods",
        multi_boost_max_share: float = 0.02,
        max_bytes: int = MEASURE_BUDGET,
    ) -> None:
        """`weighting`: "pods" (FGD: by pod count), "gpu" (by GPU demand), "multi" (an N-GPU pod
        weighs like N pods, but only while multi-GPU pods are under `multi_boost_max_share` of
        the pods: when they are common their pod count already protects whole nodes).
        `max_bytes`: the memo's byte budget (`MEMO_BYTES`, `ROWS_BYTES`)."""
        self.epoch = snapshot.epoch
        shapes: list[MeasuredShape] = []
        multi_share = sum(s.weight for s in snapshot.shapes if s.gpu_count > 1)
        boost = weighting == "multi" and multi_share < multi_boost_max_share
        for s in snapshot.shapes:
            w = s.weight
            if weighting == "gpu":  # weight a shape by the GPU it asks for, not by its pod count
                w *= max(s.gpu_count * s.gpu_milli, 1) / MILLI_PER_GPU
            elif boost and s.gpu_count > 1:
                w *= s.gpu_count
            shapes.append(
                MeasuredShape(
                    s.gpu_count,
                    s.gpu_milli,
                    0 if faithful or s.gpu_memory_mib is None else s.gpu_memory_mib,
                    s.cpu_milli,
                    0 if faithful else s.memory_mib,
                    s.gpu_models,
                    w,
                )
            )
        total = sum(s.weight for s in shapes) or 1.0
        self._shapes = tuple(MeasuredShape(s.count, s.milli, s.gpu_memory, s.cpu, s.memory, s.models, s.weight / total) for s in shapes)
        self._cpu_cuts = sorted({s.cpu for s in self._shapes})
        self._mem_cuts = sorted({s.memory for s in self._shapes})
        self._cpu_cut_array, self._mem_cut_array = np.array(self._cpu_cuts, dtype=np.int64), np.array(self._mem_cuts, dtype=np.int64)
        self._memo: dict[tuple[object, ...], float] = {}
        self._max_bytes = max_bytes
        self._bytes = 0  # the estimate of the memo and the compiled rows together
        # Shapes differ mostly in CPU and RAM; the per-GPU test depends only on (milli, GPU
        # memory), so it runs once per distinct pair ("demand") and the shapes index into them.
        self._demands = sorted({(s.milli, s.gpu_memory) for s in self._shapes})
        self._demand_of = {demand: i for i, demand in enumerate(self._demands)}
        self._compiled: dict[tuple[object, ...], tuple[tuple[_Row, ...], tuple[int, ...]]] = {}
        self._rows_bytes = ROWS_BYTES + ROW_BYTES * len(self._shapes)
        self._arrays: ShapeArrays | None = None

    @property
    def shapes(self) -> tuple[MeasuredShape, ...]:
        """The mix's shapes, in the order the expectation adds them."""
        return self._shapes

    @property
    def demands(self) -> Sequence[tuple[int, int]]:
        """The distinct (milli, GPU memory) per-GPU demands of the shapes, sorted."""
        return self._demands

    @property
    def arrays(self) -> ShapeArrays:
        """The shapes and demands as arrays (`frag_batch`)."""
        if self._arrays is None:
            self._arrays = ShapeArrays(self._shapes, self._demands)
        return self._arrays

    @property
    def estimated_bytes(self) -> int:
        """What the memo and the compiled rows hold now, by the estimate the budget is kept with."""
        return self._bytes

    @property
    def bucket_count(self) -> int:
        """How many values `bucket` takes (0 .. bucket_count - 1)."""
        return (len(self._cpu_cuts) + 1) * (len(self._mem_cuts) + 1)

    def bucket(self, free_cpu: int, free_memory: int) -> int:
        """Where free CPU and RAM fall among the shapes' demands (all the measure reads of them), as
        one int: a key without a tuple to hash or to keep."""
        return bisect_right(self._cpu_cuts, free_cpu) * (len(self._mem_cuts) + 1) + bisect_right(self._mem_cuts, free_memory)

    def bucket_many(self, free_cpu: np.ndarray, free_memory: np.ndarray) -> np.ndarray:
        """`bucket` of each (free CPU, free RAM) pair, as int64 (`searchsorted` on the right is
        `bisect_right`): the batch path's form, where `bucket` per node would be a Python call
        per candidate."""
        return np.searchsorted(self._cpu_cut_array, free_cpu, side="right") * (len(self._mem_cuts) + 1) + np.searchsorted(
            self._mem_cut_array, free_memory, side="right"
        )

    def key(self, models: frozenset[str], free_cpu: int, free_memory: int, gpus: Sequence[GpuFree]) -> tuple[object, ...]:
        return (models, bisect_right(self._cpu_cuts, free_cpu), bisect_right(self._mem_cuts, free_memory), tuple(sorted(gpus)))

    def of(self, models: frozenset[str], free_cpu: int, free_memory: int, gpus: Sequence[GpuFree]) -> float:
        key = self.key(models, free_cpu, free_memory, gpus)
        value = self._memo.get(key)
        if value is None:
            rows, _ = self._rows(key[:3], models, free_cpu, free_memory)
            counts: list[_Counts | None] = [None] * len(self._demands)
            value = self._remember(key, self._sum(rows, key[3], sum(f for f, _ in gpus), counts), self._value_bytes(models, gpus))  # type: ignore[arg-type]
        return value

    def of_variants(
        self, models: frozenset[str], free_cpu: int, free_memory: int, gpus: Sequence[GpuFree], changes: Sequence[tuple[int, GpuFree]]
    ) -> list[float]:
        """`of` for each vector that differs from `gpus` in one GPU (position, new value): the
        candidate GPUs of one share. A memo miss is derived from `gpus`' per-demand counts in
        O(demands) instead of a pass over every GPU per demand."""
        prefix = (models, bisect_right(self._cpu_cuts, free_cpu), bisect_right(self._mem_cuts, free_memory))
        compiled: tuple[tuple[_Row, ...], tuple[int, ...]] | None = None
        base: list[_Counts | None] = [None] * len(self._demands)
        base_idle = sum(f for f, _ in gpus)
        size = self._value_bytes(models, gpus)
        out: list[float] = []
        for position, new in changes:
            after = list(gpus)
            old = after[position]
            after[position] = new
            key = (*prefix, tuple(sorted(after)))
            value = self._memo.get(key)
            if value is None:
                if compiled is None:
                    compiled = self._rows(prefix, models, free_cpu, free_memory)
                rows, used = compiled
                counts: list[_Counts | None] = [None] * len(self._demands)
                for d in used:
                    counts[d] = self._changed(self._counts(gpus, d, base), d, old, new)
                value = self._remember(key, self._sum(rows, after, base_idle - old[0] + new[0], counts), size)
            out.append(value)
        return out

    @staticmethod
    def _value_bytes(models: frozenset[str], gpus: Sequence[GpuFree]) -> int:
        """The estimate of one memoised value (`MEMO_BYTES`)."""
        return MEMO_BYTES + sys.getsizeof(models) + MEMO_GPU_BYTES * len(gpus)

    def _remember(self, key: tuple[object, ...], value: float, size: int) -> float:
        if self._make_room(len(self._memo) >= _MEMO_LIMIT, size):
            self._memo[key] = value
            self._bytes += size
        return value

    def _make_room(self, full: bool, size: int) -> bool:
        """Empty the memo and the compiled rows when they are `full` or `size` more bytes would
        pass the budget; False when `size` alone is more than the budget (not remembered)."""
        if size > self._max_bytes:
            return False
        if full or self._bytes + size > self._max_bytes:
            self._memo.clear()
            self._compiled.clear()
            self._bytes = 0
        return True

    def _rows(
        self, prefix: tuple[object, ...], models: frozenset[str], free_cpu: int, free_memory: int
    ) -> tuple[tuple[_Row, ...], tuple[int, ...]]:
        """The shapes in order as (weight, count, demand), demand -1 where the node cannot host
        the shape at all, and the demands used. Depends on CPU and RAM only through their
        buckets, like the memo."""
        compiled = self._compiled.get(prefix)
        if compiled is None:
            rows = tuple(
                (s.weight, s.count, -1)
                if s.count == 0 or s.cpu > free_cpu or s.memory > free_memory or (s.models is not None and not (s.models & models))
                else (s.weight, s.count, self._demand_of[(s.milli, s.gpu_memory)])
                for s in self._shapes
            )
            compiled = (rows, tuple(sorted({d for _, _, d in rows if d >= 0})))
            size = self._rows_bytes + sys.getsizeof(models)
            if self._make_room(False, size):
                self._compiled[prefix] = compiled
                self._bytes += size
        return compiled

    def _counts(self, gpus: Sequence[GpuFree], d: int, cache: list[_Counts | None]) -> _Counts:
        """(stranded milli, GPUs that fit) of `gpus` for demand `d`."""
        counted = cache[d]
        if counted is None:
            milli, gpu_memory = self._demands[d]
            stranded = fitting = 0
            for free, mem in gpus:
                if free < milli or mem < gpu_memory:
                    stranded += free
                else:
                    fitting += 1
            counted = cache[d] = (stranded, fitting)
        return counted

    def _changed(self, counted: _Counts, d: int, old: GpuFree, new: GpuFree) -> _Counts:
        milli, gpu_memory = self._demands[d]
        stranded, fitting = counted
        if old[0] < milli or old[1] < gpu_memory:
            stranded -= old[0]
        else:
            fitting -= 1
        if new[0] < milli or new[1] < gpu_memory:
            stranded += new[0]
        else:
            fitting += 1
        return stranded, fitting

    def _sum(self, rows: tuple[_Row, ...], gpus: Sequence[GpuFree], idle: int, counts: list[_Counts | None]) -> float:
        """The expectation over the shapes, added in the shapes' order so the value is bit for bit
        what FGD's shape-by-shape loop gives (`reference.plain_measure`; a last-digit difference
        can move a pod). The counts come from `_counts` or, for a vector one GPU away from
        another, from that vector's counts (`_changed`), whichever the caller has."""
        if idle == 0:
            return 0.0
        frag = 0.0
        for weight, count, d in rows:
            if d < 0:
                frag += weight * idle
                continue
            counted = counts[d]
            if counted is None:
                counted = self._counts(gpus, d, counts)
            frag += weight * (idle if counted[1] < count else counted[0])
        return frag
