"""The fragmentation policies' scoring written the plain way: no memo, no node vectors, no
arrays, every GPU of every node looked at for every shape of the mix.

Why it is production code: the fast paths (`FragmentationMeasure`'s memo and incremental counts,
the policies' simple path and its batch `frag_simple.SimpleBatch`, `frag_batch`'s arrays, the
batch score terms of `FragmentationAwarePolicy`, `EvaluationCache`'s shortcuts and
`CapacityTable`) must each give exactly what this gives, to the last bit: a last-digit difference
in a score can move a pod. The property tests (tests/tessera/alloc/test_reference_equivalence.py)
compare every path with it on random nodes and pods. A change of what a policy means is made
here first, then in the fast paths, until the tests agree again.

The parts every path shares are written once, here, and the policies call them on their scalar
path: the GPU choice of a pod the simple path does not take (`fragmentation_increase`, given the
policy's memoised measure) and the score from the increase (`fgd_key`, `AwareTerms.key`).
`Policy.reference_evaluate` puts them together with `plain_measure` for one node.

The node-local policies (binpack, spread, bestfit, dotprod, random: `tessera.alloc.policy`) are
plain already: their `evaluate` is their reference, and their fast path is `EvaluationCache`.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tessera.alloc.assign import Assignment, Slot, assign, host_fit, slots_for
from tessera.alloc.frag_batch import Raw, sigmoid_score
from tessera.alloc.frag_settings import FragAwareSettings
from tessera.alloc.fragmentation import GpuFree, HostDemand, MeasuredShape
from tessera.alloc.model import MILLI_PER_GPU, ContainerRequest, FitFailure, NodeState, PodRequest
from tessera.alloc.model_pressure import ModelPressure
from tessera.alloc.policy import gpu_rank_for
from tessera.alloc.reservation import Reservations

MeasureOf = Callable[[frozenset[str], int, int, Sequence[GpuFree]], float]
"""(GPU models of the node, free CPU milli, free RAM MiB, (free milli, free memory) per usable
GPU) -> expected fragmented milli-GPUs: `FragmentationMeasure.of` or `plain_measure`."""


def plain_measure(shapes: Sequence[MeasuredShape], models: frozenset[str], free_cpu: int, free_memory: int, gpus: Sequence[GpuFree]) -> float:
    """FGD's expected fragmentation, shape by shape in the mix's order (the order fixes the
    float sum): for a shape the node cannot host (no GPUs asked, CPU, RAM, models, too few GPUs
    with the shape's share free) all its idle compute is fragment, else the compute of the GPUs
    that cannot take the share."""
    idle = sum(free for free, _ in gpus)
    if idle == 0:
        return 0.0
    frag = 0.0
    for s in shapes:
        hostable = s.count > 0 and s.cpu <= free_cpu and s.memory <= free_memory and (s.models is None or bool(s.models & models))
        fitting = [free for free, memory in gpus if free >= s.milli and memory >= s.gpu_memory]
        if hostable and len(fitting) >= s.count:
            frag += s.weight * (idle - sum(fitting))
        else:
            frag += s.weight * idle
    return frag


def _free(slots: Sequence[Slot]) -> list[GpuFree]:
    return [(s.free_milli, s.free_memory_mib) for s in slots]


def fragmentation_increase(node: NodeState, pod: PodRequest, measure_of: MeasureOf, faithful: bool) -> Raw:
    """(fragmentation increase, GPUs per container, idle GPUs left) of placing `pod` on `node`,
    or why it does not fit. Each GPU is taken by `assign`: the GPU whose use leaves the lowest
    fragmentation, rounded to 6 decimals (so float noise cannot split GPUs in the same state),
    the lowest index on a tie. FGD (`faithful`) ignores the node's GPU placement label."""
    if (failure := host_fit(node, pod)) is not None:
        return failure
    cpu_after = node.free_cpu_milli - pod.cpu_milli
    mem_after = node.free_memory_mib - pod.memory_mib
    models = node.models

    def frag_after(slots: Sequence[Slot], i: int, c: ContainerRequest) -> tuple[float, ...]:
        gpus = _free(slots)
        free, memory = gpus[i]
        take = MILLI_PER_GPU if c.whole else c.gpu_milli
        gpus[i] = (free - take, memory - (slots[i].memory_mib if c.whole else (c.gpu_memory_mib or 0)))
        return (round(measure_of(models, cpu_after, mem_after, gpus), 6),)

    result = assign(node, pod, frag_after if faithful else gpu_rank_for(node, frag_after))
    if isinstance(result, FitFailure):
        return result
    choice, slots = result
    before = measure_of(models, node.free_cpu_milli, node.free_memory_mib, _free(slots_for(node, pod)))
    after = measure_of(models, cpu_after, mem_after, _free(slots))
    return after - before, choice, sum(1 for s in slots if s.idle)


def fgd_key(increase: float) -> tuple[float, ...]:
    """FGD's score as the authors' scheduler plugin computes it: `int(100 * sigmoid(-x))`."""
    return (float(sigmoid_score(increase)),)


def host_increase(node: NodeState, pod: PodRequest, host: HostDemand) -> float:
    """How much GPU compute placing `pod` leaves unfed by the node's CPU and RAM."""
    free = sum(g.free_milli for g in node.gpus if g.healthy)
    cpu, memory = node.free_cpu_milli, node.free_memory_mib
    return host.unfed(free - pod.gpu_milli_total, cpu - pod.cpu_milli, memory - pod.memory_mib) - host.unfed(free, cpu, memory)


@dataclass(frozen=True)
class AwareTerms:
    """What the fragmentation-aware score adds to the increase, as of one mix snapshot."""

    settings: FragAwareSettings
    host: HostDemand
    pressure: ModelPressure
    reservations: Reservations

    def model_cost(self, node: NodeState, pod: PodRequest, choice: Assignment) -> float:
        """Milli-GPUs of limited pods expected to fail because this placement uses their models
        (on a node of one model, the pod's whole GPU compute at that model's cost)."""
        cost = self.pressure.cost
        if len(node.models) == 1:
            return pod.gpu_milli_total * cost(node.gpus[0].model)
        model = {g.index: g.model for g in node.gpus}
        return sum(
            (MILLI_PER_GPU if c.whole else c.gpu_milli) * cost(model[i]) for c, indices in zip(pod.gpu_containers, choice) for i in indices
        )

    def key(self, node: NodeState, pod: PodRequest, placed: tuple[float, Assignment, int], host_increase: float) -> tuple[float, float, float, float]:
        """(band, node size, in use, fewer idle GPUs) of a placement: `placed` is
        `fragmentation_increase`'s, `host_increase` is `host_increase(node, pod, self.host)`."""
        increase, choice, idle_after = placed
        st = self.settings
        if st.host_weight:
            increase += st.host_weight * host_increase
        if st.model_weight and self.pressure:
            increase += st.model_weight * self.model_cost(node, pod, choice)
        if st.scarce_weight:
            increase += st.scarce_weight * self.reservations.scarce_loss(node, pod, choice)
        if st.sigmoid_bands:
            banded = float(sigmoid_score(increase, st.band_scale))
        elif st.tolerance_milli > 0:
            banded = -math.floor(increase / st.tolerance_milli + 1e-9)
        else:
            banded = -round(increase, 6)
        if self.reservations.active:
            # Reserved GPUs lost come first: each one costs more than the whole band range (the
            # sigmoid saturates, so an added increase could not tell 8 lost GPUs from 16).
            banded -= (st.band_scale + 1) * self.reservations.penalty(node, pod, choice) / MILLI_PER_GPU
        in_use = 1.0 if st.prefer_in_use and (any(g.used_milli for g in node.gpus) or node.used_cpu_milli > 0) else 0.0
        fewer_idle = -float(idle_after) if st.prefer_fewer_idle else 0.0
        # No exact-increase key after the bands: ties must fall to the fixed node ranking, which
        # consolidates work on the same nodes (measured: breaking ties by the exact increase
        # scatters pods and loses ~1 % of allocation at full load).
        size = -float(st.node_size_preference * len(node.gpus))
        return (float(banded), size, in_use, fewer_idle)
