"""Placement policies: how a node is scored for a pod and which of its GPUs each container gets.

Every policy implements `Policy`: `evaluate(node, pod)` returns an `Evaluation` (a score, a
lexicographic key for exact ranking, and the GPU choice) or the `FitFailure` that rules the node
out; `evaluate_many` does the same for many nodes; `node_changed`, `node_removed` and `use_mix`
tell it about the inventory and the workload mix (no-ops for the policies that score each node
on its own, `NodeLocalPolicy`). `tessera.alloc.reference` computes every policy's evaluation the
plain way; the tests compare each fast path with it. Node-level policy comes from scheduler configuration; GPU-level binpack/spread is a pool
setting (node label `tessera.dev/gpu-placement`) that, when present, decides the GPUs inside the
chosen node. Without the label the node policy chooses: binpack packs, spread spreads, and the
fragmentation policies take the GPU that strands the least capacity.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from tessera.alloc.assign import Assignment, GpuRank, Slot, assign, gpu_binpack, gpu_spread, host_fit
from tessera.alloc.model import MILLI_PER_GPU, ContainerRequest, FitFailure, NodeState, PodRequest
from tessera.alloc.workload import MixSnapshot


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
    """What `Cluster` and `EvaluationCache` call on a node policy."""

    name: PlacementPolicy
    cacheable: bool  # False: every evaluation must be recomputed (the random baseline)
    # True: evaluate() rules a node out exactly as host_fit then assign() do (same reason), so a
    # cache may reject from a node summary without calling it (`assign.certain_failure`)
    standard_fit: bool

    @property
    def epoch(self) -> int:
        """Changes whenever scores of unchanged nodes may change (a new workload-mix snapshot)."""
        ...

    @property
    def snapshot(self) -> MixSnapshot | None:
        """The workload mix the policy scores against; None for a policy that reads no mix."""
        ...

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure: ...

    def evaluate_many(self, nodes: Sequence[NodeState], pod: PodRequest) -> list[Evaluation | FitFailure]:
        """`[self.evaluate(node, pod) for node in nodes]`, equal result for result (a policy may
        share work between the nodes)."""
        ...

    def reference_evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        """`evaluate` computed the plain, unoptimised way (`tessera.alloc.reference`): what every
        fast path (memos, batches, `EvaluationCache`) must equal."""
        ...

    def node_changed(self, node: NodeState) -> None:
        """The cluster added `node` or changed it (a new `version`); called for every node when
        the policy is introduced to a cluster."""
        ...

    def node_removed(self, name: str) -> None: ...

    def use_mix(self, snapshot: MixSnapshot) -> None:
        """Score against this workload-mix snapshot from now on."""
        ...


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


class NodeLocalPolicy(ABC):
    """A policy that scores each node on its own, from the node and the pod alone: it reads no
    mix and keeps nothing per node, so the inventory and mix notifications are no-ops."""

    name: PlacementPolicy
    cacheable = True
    standard_fit = True
    snapshot: MixSnapshot | None = None

    @property
    def epoch(self) -> int:
        return 0

    @abstractmethod
    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure: ...

    def evaluate_many(self, nodes: Sequence[NodeState], pod: PodRequest) -> list[Evaluation | FitFailure]:
        return [self.evaluate(node, pod) for node in nodes]

    def reference_evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        return self.evaluate(node, pod)  # plain already: the fast path is `EvaluationCache`

    def node_changed(self, node: NodeState) -> None:
        """Nothing to update: a node-local policy scores each node from the node alone."""

    def node_removed(self, name: str) -> None:
        """Nothing to forget: a node-local policy keeps no per-node state."""

    def use_mix(self, snapshot: MixSnapshot) -> None:
        """Ignored: a node-local policy does not weigh the workload mix."""


class BinpackPolicy(NodeLocalPolicy):
    """Fill the fullest node first (least free GPU after placement); GPUs packed inside it."""

    name = PlacementPolicy.BINPACK

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        result = _fill_after(node, pod, gpu_binpack)
        if isinstance(result, FitFailure):
            return result
        fill, choice = result
        return Evaluation((fill,), choice)


class SpreadPolicy(NodeLocalPolicy):
    """Emptiest node first; GPUs spread inside it."""

    name = PlacementPolicy.SPREAD

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        result = _fill_after(node, pod, gpu_spread)
        if isinstance(result, FitFailure):
            return result
        fill, choice = result
        return Evaluation((1.0 - fill,), choice)


class BestFitPolicy(NodeLocalPolicy):
    """Paper baseline: the node with the least remaining (CPU, GPU) after placement, equal weights."""

    name = PlacementPolicy.BESTFIT

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        result = _fill_after(node, pod, gpu_binpack)
        if isinstance(result, FitFailure):
            return result
        fill, choice = result
        gpu_left = 1.0 - fill
        cpu_left = (node.free_cpu_milli - pod.cpu_milli) / node.cpu_milli if node.cpu_milli else 0.0
        return Evaluation((-(gpu_left + cpu_left) / 2,), choice)


class DotProductPolicy(NodeLocalPolicy):
    """Paper baseline: largest dot product of the pod's (CPU, GPU) request and the node's free share."""

    name = PlacementPolicy.DOTPROD

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


class RandomPolicy(NodeLocalPolicy):
    """Paper baseline: a uniformly random feasible node (seeded), random feasible GPU."""

    name = PlacementPolicy.RANDOM
    cacheable = False

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
