"""FGD's fragmentation measure, generalised, with memoisation.

For one node and one typical pod shape t (FGD, USENIX ATC'23, section 4): if the node cannot host
t at all (model, CPU, not enough GPUs with t's share free) every idle milli-GPU on the node is
fragment for t; otherwise the fragment is the idle compute on GPUs that individually cannot take
t's share. The node's fragmentation is the expectation over the workload mix. Tessera's
generalisation adds GPU memory (a GPU with the compute but not the memory is fragment) and host
memory (a node without the RAM cannot host t); `faithful=True` turns both off, as in the paper.

The value depends only on (GPU models, a bucket of free CPU/RAM, the multiset of per-GPU free
capacity), so it is memoised on that key: in a 1213-node cluster most nodes share a few states.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.alloc.model import MILLI_PER_GPU
from tessera.alloc.workload import MixSnapshot

GpuFree = tuple[int, int]  # (free milli, free memory MiB) of one usable GPU
_MEMO_LIMIT = 500_000  # entries; the memo is dropped when it grows past this (bounded memory)


@dataclass(frozen=True)
class _Shape:
    count: int
    milli: int
    gpu_memory: int  # 0 = no GPU memory condition
    cpu: int
    memory: int  # 0 = no host memory condition
    models: frozenset[str] | None
    weight: float


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
        self._memo: dict[tuple[object, ...], float] = {}

    def key(self, models: frozenset[str], free_cpu: int, free_memory: int, gpus: Sequence[GpuFree]) -> tuple[object, ...]:
        return (models, bisect_right(self._cpu_cuts, free_cpu), bisect_right(self._mem_cuts, free_memory), tuple(sorted(gpus)))

    def of(self, models: frozenset[str], free_cpu: int, free_memory: int, gpus: Sequence[GpuFree]) -> float:
        key = self.key(models, free_cpu, free_memory, gpus)
        value = self._memo.get(key)
        if value is None:
            value = self._compute(models, free_cpu, free_memory, key[3])  # type: ignore[arg-type]
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = value
        return value

    def _compute(self, models: frozenset[str], free_cpu: int, free_memory: int, gpus: tuple[GpuFree, ...]) -> float:
        idle = sum(f for f, _ in gpus)
        if idle == 0:
            return 0.0
        frag = 0.0
        for s in self._shapes:
            if s.count == 0 or s.cpu > free_cpu or s.memory > free_memory or (s.models is not None and not (s.models & models)):
                frag += s.weight * idle
                continue
            stranded = 0
            fitting = 0
            for free, mem in gpus:
                if free < s.milli or mem < s.gpu_memory:
                    stranded += free
                else:
                    fitting += 1
            frag += s.weight * (idle if fitting < s.count else stranded)
        return frag
