"""FGD's fragmentation measure, generalised, with memoisation.

For one node and one typical pod shape t (FGD, USENIX ATC'23, section 4): if the node cannot host
t at all (model, CPU, not enough GPUs with t's share free) every idle milli-GPU on the node is
fragment for t; otherwise the fragment is the idle compute on GPUs that individually cannot take
t's share. The node's fragmentation is the expectation over the workload mix. Tessera's
generalisation adds GPU memory (a GPU with the compute but not the memory is fragment) and host
memory (a node without the RAM cannot host t); `faithful=True` turns both off, as in the paper.

The value depends only on (GPU models, a bucket of free CPU/RAM, the multiset of per-GPU free
capacity), so it is memoised on that key: in a 1213-node cluster most nodes share a few states.

`HostDemand` is the second measure the fragmentation-aware policy adds: FGD asks only whether the
node can host *one* more pod of each shape, so it cannot see a node whose CPU or RAM will run out
long before its GPUs do. `HostDemand.unfed` counts the GPU compute a node's free CPU and RAM
cannot feed at the CPU and RAM the mix's GPU pods ask per GPU.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tessera.alloc.model import MILLI_PER_GPU
from tessera.alloc.workload import MixSnapshot

GpuFree = tuple[int, int]  # (free milli, free memory MiB) of one usable GPU
_MEMO_LIMIT = 500_000  # entries; the memo is dropped when it grows past this (bounded memory)
_Row = tuple[float, int, int]  # (weight, GPU count, demand index or -1: the node cannot host the shape)
_Counts = tuple[int, int]  # (stranded milli, GPUs that fit) of one vector for one demand


@dataclass(frozen=True)
class _Shape:
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


class FragmentationMeasure:
    """Expected fragmented milli-GPUs of a node state under one mix snapshot."""

    def __init__(
        self, snapshot: MixSnapshot, *, faithful: bool = False, weighting: str = "pods", multi_boost_max_share: float = 0.02
    ) -> None:
        """`weighting`: "pods" (FGD: by pod count), "gpu" (by GPU demand), "multi" (an N-GPU pod
        weighs like N pods, but only while multi-GPU pods are under `multi_boost_max_share` of
        the pods: when they are common their pod count already protects whole nodes)."""
        self.epoch = snapshot.epoch
        shapes: list[_Shape] = []
        multi_share = sum(s.weight for s in snapshot.shapes if s.gpu_count > 1)
        boost = weighting == "multi" and multi_share < multi_boost_max_share
        for s in snapshot.shapes:
            w = s.weight
            if weighting == "gpu":  # weight a shape by the GPU it asks for, not by its pod count
                w *= max(s.gpu_count * s.gpu_milli, 1) / MILLI_PER_GPU
            elif boost and s.gpu_count > 1:
                w *= s.gpu_count
            shapes.append(
                _Shape(
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
        self._shapes = tuple(_Shape(s.count, s.milli, s.gpu_memory, s.cpu, s.memory, s.models, s.weight / total) for s in shapes)
        self._cpu_cuts = sorted({s.cpu for s in self._shapes})
        self._mem_cuts = sorted({s.memory for s in self._shapes})
        self._cpu_cut_array, self._mem_cut_array = np.array(self._cpu_cuts, dtype=np.int64), np.array(self._mem_cuts, dtype=np.int64)
        self._memo: dict[tuple[object, ...], float] = {}
        # Shapes differ mostly in CPU and RAM; the per-GPU test depends only on (milli, GPU
        # memory), so it runs once per distinct pair ("demand") and the shapes index into them.
        self._demands = sorted({(s.milli, s.gpu_memory) for s in self._shapes})
        self._demand_of = {demand: i for i, demand in enumerate(self._demands)}
        self._compiled: dict[tuple[object, ...], tuple[tuple[_Row, ...], tuple[int, ...]]] = {}

    def buckets(self, free_cpu: int, free_memory: int) -> tuple[int, int]:
        """Where free CPU and RAM fall among the shapes' demands: all the measure reads of them."""
        return bisect_right(self._cpu_cuts, free_cpu), bisect_right(self._mem_cuts, free_memory)

    @property
    def bucket_count(self) -> int:
        """How many values `bucket` takes (0 .. bucket_count - 1)."""
        return (len(self._cpu_cuts) + 1) * (len(self._mem_cuts) + 1)

    def bucket(self, free_cpu: int, free_memory: int) -> int:
        """`buckets` as one int: a key without a tuple to hash or to keep."""
        return bisect_right(self._cpu_cuts, free_cpu) * (len(self._mem_cuts) + 1) + bisect_right(self._mem_cuts, free_memory)

    def bucket_many(self, free_cpu: np.ndarray, free_memory: np.ndarray) -> np.ndarray:
        """`bucket` of each (free CPU, free RAM) pair, as int64 (`searchsorted` on the right is
        `bisect_right`)."""
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
            value = self._remember(key, self._sum(rows, key[3], sum(f for f, _ in gpus), counts))  # type: ignore[arg-type]
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
                value = self._remember(key, self._sum(rows, after, base_idle - old[0] + new[0], counts))
            out.append(value)
        return out

    def _remember(self, key: tuple[object, ...], value: float) -> float:
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
            self._compiled.clear()
        self._memo[key] = value
        return value

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
            compiled = self._compiled[prefix] = (rows, tuple(sorted({d for _, _, d in rows if d >= 0})))
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
        what FGD's shape-by-shape loop gives (a last-digit difference can move a pod)."""
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
