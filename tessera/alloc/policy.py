"""Placement policies: how a node is scored for a pod and which of its GPUs each container gets.

Every policy implements `Policy.evaluate(node, pod)`, returning an `Evaluation` (a score, a
lexicographic key for exact ranking, and the GPU choice) or the `FitFailure` that rules the node
out. Node-level policy comes from scheduler configuration; GPU-level binpack/spread is a pool
setting (node label `tessera.dev/gpu-placement`) that, when present, decides the GPUs inside the
chosen node. Without the label the node policy chooses: binpack packs, spread spreads, and the
fragmentation policies take the GPU that strands the least capacity.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from tessera.alloc.assign import Assignment, GpuRank, Slot, assign, gpu_binpack, gpu_spread, host_fit
from tessera.alloc.model import MILLI_PER_GPU, ContainerRequest, FitFailure, NodeState, PodRequest


class PlacementPolicy(str, Enum):
    """Node-level policy names (the scheduler config and `tessera sim --policy` values)."""

    FRAGMENTATION_AWARE = "fragmentation-aware"  # Tessera's default
    FGD = "fgd"  # faithful FGD (USENIX ATC'23), for comparison
    BINPACK = "binpack"
    SPREAD = "spread"
    BESTFIT = "bestfit"  # paper baseline: least remaining weighted resources
    DOTPROD = "dotprod"  # paper baseline: largest dot product of request and free vector
    RANDOM = "random"  # paper baseline: any node that fits

    @staticmethod
    def parse(text: str) -> PlacementPolicy:
        try:
            return PlacementPolicy(text)
        except ValueError:
            names = ", ".join(p.value for p in PlacementPolicy)
            raise ValueError(f"unknown placement policy {text!r}; choose one of: {names}") from None


DEFAULT_POLICY = PlacementPolicy.FRAGMENTATION_AWARE


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A feasible placement of a pod on one node. Higher `key` is better (compared as a tuple);
    `score` is its first element, the value the extender reports. Slots: the caches hold one
    per (node, shape), and an instance without a `__dict__` is one object for the collector
    to walk instead of two."""

    key: tuple[float, ...]
    assignment: Assignment

    @property
    def score(self) -> float:
        return self.key[0]


class Policy(Protocol):
    name: PlacementPolicy
    cacheable: bool  # False: every evaluation must be recomputed (the random baseline)
    # True: evaluate() rules a node out exactly as host_fit then assign() do (same reason), so a
    # cache may reject from a node summary without calling it (`assign.certain_failure`)
    standard_fit: bool

    @property
    def epoch(self) -> int:
        """Changes whenever scores of unchanged nodes may change (a new workload-mix snapshot)."""
        ...

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure: ...


def gpu_rank_for(node: NodeState, default: GpuRank) -> GpuRank:
    placement = node.gpu_placement
    if placement == "binpack":
        return gpu_binpack
    if placement == "spread":
        return gpu_spread
    return default


def node_gpu_totals(node: NodeState) -> tuple[int, int]:
    """(healthy capacity, used) in milli over healthy GPUs."""
    cap = used = 0
    for g in node.gpus:
        if g.healthy:
            cap += MILLI_PER_GPU
            used += g.used_milli
    return cap, used


def _used_after(slots: Sequence[Slot]) -> int:
    return sum(s.used_milli for s in slots)


def _fill_after(node: NodeState, pod: PodRequest, gpu_order: GpuRank) -> tuple[float, Assignment] | FitFailure:
    """Share of the node's GPU compute in use once the pod is placed with GPUs in `gpu_order`."""
    if (failure := host_fit(node, pod)) is not None:
        return failure
    result = assign(node, pod, gpu_rank_for(node, gpu_order))
    if isinstance(result, FitFailure):
        return result
    choice, slots = result
    cap = len(slots) * MILLI_PER_GPU or 1
    return _used_after(slots) / cap, choice


class BinpackPolicy:
    """Fill the fullest node first (least free GPU after placement); GPUs packed inside it."""

    name = PlacementPolicy.BINPACK
    cacheable = True
    standard_fit = True
    epoch = 0

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        result = _fill_after(node, pod, gpu_binpack)
        if isinstance(result, FitFailure):
            return result
        fill, choice = result
        return Evaluation((fill,), choice)


class SpreadPolicy:
    """Emptiest node first; GPUs spread inside it."""

    name = PlacementPolicy.SPREAD
    cacheable = True
    standard_fit = True
    epoch = 0

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        result = _fill_after(node, pod, gpu_spread)
        if isinstance(result, FitFailure):
            return result
        fill, choice = result
        return Evaluation((1.0 - fill,), choice)


class BestFitPolicy:
    """Paper baseline: the node with the least remaining (CPU, GPU) after placement, equal weights."""

    name = PlacementPolicy.BESTFIT
    cacheable = True
    standard_fit = True
    epoch = 0

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        result = _fill_after(node, pod, gpu_binpack)
        if isinstance(result, FitFailure):
            return result
        fill, choice = result
        gpu_left = 1.0 - fill
        cpu_left = (node.free_cpu_milli - pod.cpu_milli) / node.cpu_milli if node.cpu_milli else 0.0
        return Evaluation((-(gpu_left + cpu_left) / 2,), choice)


class DotProductPolicy:
    """Paper baseline: largest dot product of the pod's (CPU, GPU) request and the node's free share."""

    name = PlacementPolicy.DOTPROD
    cacheable = True
    standard_fit = True
    epoch = 0

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        result = _fill_after(node, pod, gpu_binpack)
        if isinstance(result, FitFailure):
            return result
        _, choice = result
        cap, used = node_gpu_totals(node)
        gpu_free = (cap - used) / cap if cap else 0.0
        cpu_free = node.free_cpu_milli / node.cpu_milli if node.cpu_milli else 0.0
        cpu_req = pod.cpu_milli / node.cpu_milli if node.cpu_milli else 0.0
        gpu_req = pod.gpu_milli_total / cap if cap else 0.0
        return Evaluation((cpu_req * cpu_free + gpu_req * gpu_free,), choice)


class RandomPolicy:
    """Paper baseline: a uniformly random feasible node (seeded), random feasible GPU."""

    name = PlacementPolicy.RANDOM
    cacheable = False
    standard_fit = True

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._calls = 0

    @property
    def epoch(self) -> int:
        return self._calls  # never cache: every evaluation draws a fresh number

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        self._calls += 1
        if (failure := host_fit(node, pod)) is not None:
            return failure
        rng = self._rng

        def any_gpu(_slots: Sequence[Slot], _i: int, _c: ContainerRequest) -> tuple[float, ...]:
            return (rng.random(),)

        result = assign(node, pod, any_gpu)
        if isinstance(result, FitFailure):
            return result
        return Evaluation((rng.random(),), result[0])
