"""Stranded GPU capacity for `tessera inspect`, from the placement code's fragmentation measure.

The typical requests are the shapes of the GPU pods in the cluster (pending and placed), weighted
by pod count (`static_snapshot`, as FGD does). Two figures:

- a GPU is *stranded* when it is healthy, partly allocated, has compute left, and what is left
  (compute and GPU memory) fits less than half of the requests seen in the cluster (by pod count):
  a typical request cannot use it;
- a node's `stranded_gpu` is FGD's expected fragmentation (`FragmentationMeasure`, the measure the
  fragmentation-aware policy minimises) in GPUs: the idle compute a typical request cannot use.
Host CPU and memory are not looked at (kube-scheduler checks them).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from tessera.alloc.fragmentation import FragmentationMeasure, GpuFree
from tessera.alloc.model import MILLI_PER_GPU, UNTRACKED, PodRequest
from tessera.alloc.workload import MixSnapshot, static_snapshot

TYPICAL_SHARE: Final = 0.5  # a GPU is stranded when requests fitting it weigh less than this


class StrandedMeter:
    """Both figures against one workload mix; `None` answers when no GPU pod was seen."""

    def __init__(self, requests: Iterable[PodRequest]) -> None:
        gpu_pods = [r for r in requests if r.gpu_containers]
        self._mix: MixSnapshot | None = static_snapshot(gpu_pods) if gpu_pods else None
        self._measure = FragmentationMeasure(self._mix) if self._mix is not None else None

    @property
    def known(self) -> bool:
        return self._mix is not None

    def gpu_stranded(self, model: str, healthy: bool, used_milli: int, free: GpuFree) -> bool:
        """Whether a partly used GPU's remaining capacity fits less than `TYPICAL_SHARE` of the mix."""
        free_milli, free_memory = free
        if self._mix is None or not healthy or used_milli <= 0 or free_milli <= 0:
            return False
        fitting = sum(
            shape.weight
            for shape in self._mix.shapes
            if shape.gpu_count > 0
            and (shape.gpu_models is None or model in shape.gpu_models)
            and free_milli >= shape.gpu_milli
            and free_memory >= (shape.gpu_memory_mib or 0)
        )
        return fitting < TYPICAL_SHARE

    def node_stranded_gpu(self, models: frozenset[str], healthy_free: Sequence[GpuFree]) -> float | None:
        """FGD's expected fragmented compute of a node's healthy GPUs, in GPUs."""
        if self._measure is None:
            return None
        return self._measure.of(models, UNTRACKED, UNTRACKED, healthy_free) / MILLI_PER_GPU
