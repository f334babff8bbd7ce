"""Choosing GPUs inside one node: the per-container greedy assignment every policy shares.

A policy only supplies a ranking of candidate GPUs (`GpuRank`); this module enforces the hard
rules: healthy GPUs of an allowed model, a share needs `gpu_milli` free compute (and the
requested GPU memory) on one GPU that holds fewer shares than the node's max-shares-per-gpu, a
whole-GPU request takes idle GPUs only, and containers of one
pod are assigned in order against the capacity the previous ones left.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tessera.alloc.model import MILLI_PER_GPU, ContainerRequest, FitFailure, GpuState, NodeState, PodRequest


@dataclass(slots=True)
class Slot:
    """Scratch copy of one usable GPU's free capacity while a pod is being assigned."""

    index: int
    free_milli: int
    free_memory_mib: int
    memory_mib: int
    offline_milli: int
    used_milli: int
    shares: int = 0  # containers holding a share of this GPU
    max_shares: int | None = None  # the node's max-shares-per-gpu; None = no cap

    @property
    def idle(self) -> bool:
        return self.used_milli == 0 and self.free_memory_mib == self.memory_mib

    def can_host(self, c: ContainerRequest) -> bool:
        if c.whole:
            return self.idle
        if self.max_shares is not None and self.shares >= self.max_shares:
            return False
        if self.free_milli < c.gpu_milli:
            return False
        return c.gpu_memory_mib is None or self.free_memory_mib >= c.gpu_memory_mib

    def take(self, c: ContainerRequest, offline: bool) -> None:
        milli = MILLI_PER_GPU if c.whole else c.gpu_milli
        memory = self.memory_mib if c.whole else (c.gpu_memory_mib or 0)
        self.free_milli -= milli
        self.used_milli += milli
        self.free_memory_mib -= memory
        if not c.whole:
            self.shares += 1
        if offline:
            self.offline_milli += milli


# rank(slots, candidate position, container) -> key; the smallest key wins. Slots reflect the
# containers already assigned for this pod, so a rank may look at the whole node.
GpuRank = Callable[[Sequence[Slot], int, ContainerRequest], tuple[float, ...]]
Assignment = tuple[tuple[int, ...], ...]  # GPU indices per GPU container, in container order
# The assignment of a one-container pod to GPU i, one shared object per index: the evaluation
# caches hold one per (node, shape), and a shared constant is nothing new for the collector.
_ONE_GPU: tuple[Assignment, ...] = tuple(((i,),) for i in range(64))


def one_gpu(index: int) -> Assignment:
    return _ONE_GPU[index] if 0 <= index < len(_ONE_GPU) else ((index,),)


def usable(gpu: GpuState, pod: PodRequest) -> bool:
    return gpu.healthy and (pod.gpu_models is None or gpu.model in pod.gpu_models)


def slots_for(node: NodeState, pod: PodRequest) -> list[Slot]:
    cap = node.max_shares_per_gpu
    return [
        Slot(g.index, g.free_milli, g.free_memory_mib, g.memory_mib, g.offline_milli, g.used_milli, g.shares, cap)
        for g in node.gpus
        if usable(g, pod)
    ]


def host_fit(node: NodeState, pod: PodRequest) -> FitFailure | None:
    if node.free_cpu_milli < pod.cpu_milli:
        return FitFailure.CPU
    if node.free_memory_mib < pod.memory_mib:
        return FitFailure.MEMORY
    return None


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a node can still give, summarised once per node version so that most pods that do
    not fit are rejected without building slots or running a policy (at 90 % load a whole-GPU
    pod fits on a few dozen of 1213 nodes)."""

    free_cpu_milli: int
    free_memory_mib: int
    idle_gpus: int  # healthy and idle
    max_free_milli: int  # over healthy GPUs; -1 without any
    max_free_memory_mib: int  # over healthy GPUs; -1 without any
    share_room: bool  # a healthy GPU holds fewer shares than the node's cap (True without a cap)
    models: frozenset[str]  # of every GPU, healthy or not (what assign's model check looks at)


def capacity_of(node: NodeState) -> Capacity:
    healthy = [g for g in node.gpus if g.healthy]
    cap = node.max_shares_per_gpu
    return Capacity(
        node.free_cpu_milli,
        node.free_memory_mib,
        sum(1 for g in healthy if g.idle),
        max((g.free_milli for g in healthy), default=-1),
        max((g.free_memory_mib for g in healthy), default=-1),
        cap is None or any(g.shares < cap for g in healthy),
        node.models,
    )


class Demand(NamedTuple):
    """What `certain_failure` compares a node's `Capacity` with, derived once per pod (a batch
    of 1213 nodes then costs a few comparisons per node). Per share container the conditions are
    separate, so the largest share's compute and memory stand for all of them."""

    cpu_milli: int
    memory_mib: int
    models: frozenset[str] | None
    whole_gpus: int
    share_milli: int  # largest share's compute; 0 without shares
    share_memory_mib: int  # largest GPU memory a share asks for; -1 when none asks

    @staticmethod
    def of(pod: PodRequest) -> Demand:
        whole = share = 0
        share_memory = -1
        for c in pod.containers:
            if not c.gpu_count:
                continue
            if c.whole:
                whole += c.gpu_count
            else:
                share = max(share, c.gpu_milli)
                if c.gpu_memory_mib is not None:
                    share_memory = max(share_memory, c.gpu_memory_mib)
        return Demand(pod.cpu_milli, pod.memory_mib, pod.gpu_models, whole, share, share_memory)

    def reject(self, capacity: Capacity) -> FitFailure | None:
        """The failure `host_fit` then `assign` report, where the summary alone proves it; None
        when only running them can tell. Checks in their order (CPU, memory, GPU model, GPU) so
        the reason is the same; each GPU condition is a necessary one, against the untouched node."""
        if capacity.free_cpu_milli < self.cpu_milli:
            return FitFailure.CPU
        if capacity.free_memory_mib < self.memory_mib:
            return FitFailure.MEMORY
        if self.models is not None:
            # usable GPUs depend on the model; only the "no such model at all" answer is certain
            return FitFailure.GPU_MODEL if not self.models & capacity.models else None
        if self.share_milli and (
            self.share_milli > capacity.max_free_milli or self.share_memory_mib > capacity.max_free_memory_mib or not capacity.share_room
        ):
            return FitFailure.GPU
        return FitFailure.GPU if self.whole_gpus > capacity.idle_gpus else None


def certain_failure(capacity: Capacity, pod: PodRequest) -> FitFailure | None:
    """`Demand.reject` for one pod."""
    return Demand.of(pod).reject(capacity)


def class_key(slot: Slot, pod: PodRequest) -> int:
    """qGPU co-location: online pods avoid GPUs holding offline work; offline pods seek them."""
    if pod.app_class == "offline":
        return 0 if slot.offline_milli else (1 if slot.used_milli == 0 else 2)
    return 1 if slot.offline_milli else 0


def assign(node: NodeState, pod: PodRequest, rank: GpuRank) -> tuple[Assignment, list[Slot]] | FitFailure:
    """Assign every GPU container of `pod` on `node`; returns the choice and the slots after it."""
    if pod.gpu_models is not None and not any(g.model in pod.gpu_models for g in node.gpus):
        return FitFailure.GPU_MODEL
    slots = slots_for(node, pod)
    offline = pod.app_class == "offline"
    chosen: list[tuple[int, ...]] = []
    for c in pod.gpu_containers:
        fitting = [i for i, s in enumerate(slots) if s.can_host(c)]
        if len(fitting) < c.gpu_count:
            return FitFailure.GPU
        picked: list[int] = []
        for _ in range(c.gpu_count):
            best = min(fitting, key=lambda i: (class_key(slots[i], pod), *rank(slots, i, c), slots[i].index))
            slots[best].take(c, offline)
            fitting.remove(best)
            picked.append(slots[best].index)
        chosen.append(tuple(picked))
    return tuple(chosen), slots


def gpu_binpack(slots: Sequence[Slot], i: int, c: ContainerRequest) -> tuple[float, ...]:
    """Tightest GPU first: what is left on it after this container."""
    return (slots[i].free_milli - c.gpu_milli,)


def gpu_spread(slots: Sequence[Slot], i: int, c: ContainerRequest) -> tuple[float, ...]:
    """Emptiest GPU first."""
    return (-slots[i].free_milli,)
