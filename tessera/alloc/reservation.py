"""Keeping the last nodes that can host a multi-GPU shape for it: a cluster-level look-ahead.

FGD's measure is local to a node: breaking up the 30th idle 8-GPU node costs as much as breaking
up the last one. For a multi-GPU shape only a few nodes can host (in the openb trace, 8-GPU pods
asking 120 CPU cores fit only the 39 nodes with 128 cores), what matters is how many such nodes
are left in the cluster against how many of those pods are still to come. `Reservations` counts,
per multi-GPU shape of the mix, the nodes that can host it now, and once that count falls to the
pods of that shape expected within a horizon of arrivals (learned from the mix, at least one),
a placement that leaves one of those nodes unable to host the shape ranks below every placement
that does not, fewer reserved GPUs lost first. The reservation is soft: when nothing else fits,
the pod still goes there.

A shape that fits only where another fits (on this inventory) competes for the same nodes, so a
guard keeps room for the pods of both (8-GPU pods asking 120 or 120.2 cores both need the 128-core
nodes; 8-GPU pods asking 88 cores can also use those).

Scores must stay a function of the node's state and the policy's epoch (callers cache them per
node version), so a reservation switches on or off only as a whole (`generation` changes, the
policy's epoch with it). It switches on at `keep` nodes left and off again only above `2 * keep`,
so pods released and bound around the threshold do not flush every cache.

Scarce shapes: a multi-GPU shape that only a small share of the nodes with enough GPUs could
ever host (8-GPU pods asking 120 cores: the 39 128-core nodes of 617 8-GPU nodes) loses its
hosts long before the count-based reservation switches on, because CPU-heavy single-GPU pods
prefer exactly those CPU-rich nodes. `scarce_loss` is the scarce shapes' GPUs a placement would
leave a node unable to host, at any load; the policy adds a small multiple of it to the
increase, so such nodes are broken only where it buys a better band. A prior does the same for
shapes not seen yet (`scarce_prior`): an empty node of a kind that few nodes with as many GPUs
match in CPU costs its GPUs' worth (times the same weight) to break.

Pods without GPUs (`cpu_only`) are held off reserved and scarce hosts only while CPU is
plentiful: while the cluster's free CPU can feed its free GPUs at what the mix's GPU pods ask per
GPU (`HostDemand.cpu_per_milli`) `cpu_headroom` times over. Where CPU is the binding resource
(openb cpu300: free CPU falls below that at ~70 % arrived, the cluster stops at ~86 % of its
GPUs because the cores run out) a CPU-only pod kept off a CPU-rich reserved node takes its cores
from a node whose GPUs then starve; every core is worth more to the GPU pods than the whole
nodes kept for a rare shape. Where CPU-only pods are many but CPU is not short (cpu250: free CPU
stays above 1.1 times what the free GPUs need up to 92 % arrived) they would otherwise take the
last 128-core nodes that 8-GPU 120-core pods need.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.alloc.assign import Assignment
from tessera.alloc.model import MILLI_PER_GPU, NodeState, PodRequest
from tessera.alloc.workload import MixSnapshot


@dataclass(frozen=True)
class _Guard:
    gpus: int
    cpu_milli: int
    memory_mib: int
    models: frozenset[str] | None
    keep: int  # its pods expected within the horizon, >= 1


# CPU-only pods are charged again only once the free CPU is this many times the headroom
_CPU_HYSTERESIS = 1.25

_Signature = tuple[tuple[tuple[str, int], ...], int, int]  # (healthy GPUs per model, CPU, RAM) of an empty node


class Reservations:
    """Which nodes can host each multi-GPU shape of the mix, and which shapes are reserved."""

    def __init__(
        self,
        snapshot: MixSnapshot,
        horizon_pods: float,
        *,
        cpu_only: bool = False,
        cpu_per_milli: float = 0.0,
        cpu_headroom: float = 0.0,
        rare_need_cpu: bool = False,
        scarce_share: float = 0.0,
        scarce_prior: bool = False,
    ) -> None:
        """`horizon_pods` <= 0: no reservations. `cpu_only`: pods without GPUs are charged too,
        while the free CPU is at least `cpu_headroom` times the free GPU milli times
        `cpu_per_milli` (what the mix's GPU pods ask per milli-GPU); 0: always. `rare_need_cpu`:
        the shapes kept only for reservations (`MixSnapshot.rare_multi`) are guarded only then too.
        `scarce_share`: a guard whose possible hosts are at most this share of the nodes with its
        GPU count is scarce (`scarce_loss`); 0: none is."""
        self._cpu_only = cpu_only
        self._free_of: dict[str, tuple[int, int]] = {}  # node -> (free CPU milli, free milli-GPU)
        self._free_cpu = 0
        self._free_gpu = 0
        self._cpu_plenty = True
        self._cpu_settled = False  # False until first read, like `active`
        self._scarce_share = scarce_share
        self._scarce = 0  # bit i set when guard i is scarce
        self._prior = scarce_prior
        self._scarce_kinds: frozenset[_Signature] = frozenset()  # whole nodes of these kinds are scarce
        self._scarce_nodes: frozenset[str] = frozenset()  # the nodes of those kinds (a cheap test per evaluation)
        expected: dict[tuple[int, int, int, frozenset[str] | None], float] = {}
        for s in snapshot.shapes + snapshot.rare_multi:
            if s.gpu_count >= 2 and horizon_pods > 0:
                key = (s.gpu_count, s.cpu_milli, s.memory_mib, s.gpu_models)
                expected[key] = expected.get(key, 0.0) + s.weight * horizon_pods
        self._guards = tuple(_Guard(*key, max(1, math.ceil(n))) for key, n in sorted(expected.items(), key=repr))
        common = {(s.gpu_count, s.cpu_milli, s.memory_mib, s.gpu_models) for s in snapshot.shapes}
        # guards of shapes only `rare_multi` has: dropped while CPU is short (`rare_need_cpu`)
        self._rare = sum(1 << i for i, g in enumerate(self._guards) if (g.gpus, g.cpu_milli, g.memory_mib, g.models) not in common) if rare_need_cpu else 0
        gated = cpu_only or self._rare
        # the prior needs the node kinds before any multi-GPU shape is in the mix: the first pods
        # decide too (openb multigpu50 seed 43: an 8-GPU 88-core pod broke a 128-core node at
        # 0.4 % arrived, one 8-GPU 120-core pod too many failed at 89 %)
        self._tracking = bool(self._guards) or (scarce_prior and scarce_share > 0)
        self._cpu_need = cpu_headroom * cpu_per_milli if gated else 0.0  # CPU milli per free milli-GPU
        self._keep = [g.keep for g in self._guards]  # own pods plus those of shapes fitting only where it fits
        self._able: dict[str, int] = {}  # node -> bit i set when it can host guard i now
        self._counts = [0] * len(self._guards)
        self._signatures: dict[str, _Signature] = {}
        self._kinds: dict[_Signature, int] = {}  # nodes per signature
        self._active = 0  # bit i set while guard i is reserved
        self._settled = False  # False until first read: then on exactly where count <= keep
        self._generation = 0
        self._scarce_stale = False  # node kinds changed since `_scarce` was counted

    def __bool__(self) -> bool:
        return bool(self._guards)

    @property
    def generation(self) -> int:
        """Moves whenever a reservation switches on or off or the scarce shapes change."""
        if self._scarce_stale:
            self._mark_scarce()
        return self._generation

    @property
    def active(self) -> int:
        """Bit i set while guard i is reserved. Decided afresh (count <= keep) the first time it
        is read, after the inventory was tracked; with hysteresis from then on."""
        if not self._settled:
            self._settled = True
            self._active = sum(1 << i for i, keep in enumerate(self._keep) if self._counts[i] <= keep)
        return self._active if self._rare == 0 or self._plenty() else self._active & ~self._rare

    def track(self, node: NodeState) -> None:
        """The node changed (or is new): recount the shapes it can host."""
        if not self._tracking:
            return
        idle: dict[str, int] = {}
        healthy: dict[str, int] = {}
        for g in node.gpus:
            if g.healthy:
                healthy[g.model] = healthy.get(g.model, 0) + 1
                if g.idle:
                    idle[g.model] = idle.get(g.model, 0) + 1
        signature = (tuple(sorted(healthy.items())), node.free_cpu_milli + node.used_cpu_milli, node.free_memory_mib + node.used_memory_mib)
        if self._signatures.get(node.name) != signature:
            self._classify(node.name, signature)
        self._set(node.name, self._mask(idle, node.free_cpu_milli, node.free_memory_mib))
        if self._cpu_need > 0:
            self._set_free(node.name, (node.free_cpu_milli, sum(g.free_milli for g in node.gpus if g.healthy)))

    def forget(self, name: str) -> None:
        if self._tracking:
            self._set(name, 0)
            self._able.pop(name, None)
            self._classify(name, None)
            if self._cpu_need > 0:
                self._set_free(name, (0, 0))
                del self._free_of[name]

    @property
    def cpu_plenty(self) -> bool:
        """Whether pods without GPUs are charged now (`cpu_only` and CPU not short)."""
        return self._cpu_only and self._plenty()

    def _plenty(self) -> bool:
        """Whether the free CPU feeds the free GPUs with the headroom. Decided afresh the first
        time it is read; then it switches off below the headroom and on again only above
        `_CPU_HYSTERESIS` times it, so binds around the threshold do not flush every cache."""
        if not self._cpu_settled:
            self._cpu_settled = True
            self._cpu_plenty = self._free_cpu >= self._cpu_need * self._free_gpu
        return self._cpu_plenty

    def _set_free(self, name: str, free: tuple[int, int]) -> None:
        old_cpu, old_gpu = self._free_of.get(name, (0, 0))
        self._free_of[name] = free
        self._free_cpu += free[0] - old_cpu
        self._free_gpu += free[1] - old_gpu
        if not self._cpu_settled:
            return
        need = self._cpu_need * self._free_gpu
        plenty = self._free_cpu >= need * _CPU_HYSTERESIS if not self._cpu_plenty else self._free_cpu >= need
        if plenty != self._cpu_plenty:
            self._cpu_plenty = plenty
            self._generation += 1
    def penalty(self, node: NodeState, pod: PodRequest, assignment: Assignment) -> float:
        """Milli-GPUs of reserved shapes this placement leaves the node unable to host (summed
        over the shapes it loses)."""
        return self.penalties((node,), pod, (assignment,))[0]

    def _mask(self, idle: dict[str, int], free_cpu: int, free_memory: int) -> int:
        mask = 0
        for i, g in enumerate(self._guards):
            if g.cpu_milli > free_cpu or g.memory_mib > free_memory:
                continue
            usable = sum(n for model, n in idle.items() if g.models is None or model in g.models)
            if usable >= g.gpus:
                mask |= 1 << i
        return mask

    def _classify(self, name: str, signature: _Signature | None) -> None:
        """Node kinds changed: recompute how many nodes each guard keeps. A shape that only fits
        where another fits (on this inventory) competes for the same nodes, so a guard keeps
        room for its own pods and for theirs (8-GPU pods asking 120 or 120.2 cores both need the
        128-core nodes)."""
        changed = False
        old = self._signatures.pop(name, None)
        if old is not None:
            self._kinds[old] -= 1
            if not self._kinds[old]:
                del self._kinds[old]
                changed = True
        if signature is not None:
            self._signatures[name] = signature
            self._kinds[signature] = self._kinds.get(signature, 0) + 1
            changed |= self._kinds[signature] == 1
        self._scarce_stale = self._scarce_share > 0  # counted on next read: nodes arrive one by one
        if not changed:
            return  # the same kinds of nodes exist as before
        hosts = [frozenset(k for k in self._kinds if self._hosts(g, k)) for g in self._guards]
        self._keep = [
            sum(u.keep for u, where in zip(self._guards, hosts) if where and where <= hosts[i]) or g.keep
            for i, g in enumerate(self._guards)
        ]
        self._switch()

    def _mark_scarce(self) -> None:
        """Recount which guards are scarce (on node kinds, not on what is free now)."""
        self._scarce_stale = False
        kinds = self._kinds
        scarce = 0
        for i, g in enumerate(self._guards):
            hosts = sum(n for k, n in kinds.items() if self._hosts(g, k))
            peers = sum(n for k, n in kinds.items() if sum(c for _, c in k[0]) >= g.gpus)
            if 0 < hosts <= self._scarce_share * peers:
                scarce |= 1 << i
        kinds_scarce: frozenset[_Signature] = frozenset()
        if self._prior:  # whole nodes of a kind few nodes with as many GPUs match in CPU
            size = {k: (sum(c for _, c in k[0]), k[1]) for k in kinds}  # (GPUs, CPU milli)
            kinds_scarce = frozenset(
                k for k, (gpus, cpu) in size.items()
                if gpus >= 2
                and sum(n for k2, n in kinds.items() if size[k2][0] >= gpus and size[k2][1] >= cpu)
                <= self._scarce_share * sum(n for k2, n in kinds.items() if size[k2][0] >= gpus)
            )
        self._scarce_nodes = frozenset(name for name, k in self._signatures.items() if k in kinds_scarce) if kinds_scarce else frozenset()
        if scarce != self._scarce or kinds_scarce != self._scarce_kinds:
            self._scarce = scarce
            self._scarce_kinds = kinds_scarce
            self._generation += 1

    def scarce_loss(self, node: NodeState, pod: PodRequest, assignment: Assignment) -> float:
        """Milli-GPUs of scarce shapes (few nodes can ever host them) this placement leaves the
        node unable to host, reserved or not. Pods without GPUs only while `cpu_plenty`."""
        return self.scarce_losses((node,), pod, (assignment,))[0]

    def scarce_losses(self, nodes: Sequence[NodeState], pod: PodRequest, assignments: Sequence[Assignment]) -> list[float]:
        """`scarce_loss` of each (node, assignment), with what does not depend on the node
        decided once (a new shape meets hundreds of candidates)."""
        if not pod.gpu_containers and not self.cpu_plenty:
            return [0.0] * len(nodes)
        if self._scarce_stale:
            self._mark_scarce()
        mask = self._scarce & ~self._rare if self._rare and not self._plenty() else self._scarce
        able, scarce_nodes, lost = self._able, self._scarce_nodes, self._lost
        out: list[float] = []
        for node, assignment in zip(nodes, assignments):
            held = able.get(node.name, 0) & mask
            loss = lost(node, pod, assignment, held) if held else 0.0
            if node.name in scarce_nodes:
                healthy = [g for g in node.gpus if g.healthy]
                if all(g.idle for g in healthy) and node.used_cpu_milli == 0:
                    loss += len(healthy) * MILLI_PER_GPU  # a whole node of a scarce kind is broken
            out.append(loss)
        return out

    def penalties(self, nodes: Sequence[NodeState], pod: PodRequest, assignments: Sequence[Assignment]) -> list[float]:
        """`penalty` of each (node, assignment), as `scarce_losses`."""
        if not pod.gpu_containers and not self.cpu_plenty:
            return [0.0] * len(nodes)  # FragAwareSettings.reserve_cpu_only off, or CPU is short
        active, able, lost = self.active, self._able, self._lost
        out: list[float] = []
        for node, assignment in zip(nodes, assignments):
            held = able.get(node.name, 0) & active
            out.append(lost(node, pod, assignment, held) if held else 0.0)
        return out

    def _lost(self, node: NodeState, pod: PodRequest, assignment: Assignment, held: int) -> float:
        taken = {i for indices in assignment for i in indices}
        idle: dict[str, int] = {}
        for g in node.gpus:
            if g.healthy and g.idle and g.index not in taken:
                idle[g.model] = idle.get(g.model, 0) + 1
        lost = held & ~self._mask(idle, node.free_cpu_milli - pod.cpu_milli, node.free_memory_mib - pod.memory_mib)
        return float(sum(g.gpus * MILLI_PER_GPU for i, g in enumerate(self._guards) if lost >> i & 1))

    @staticmethod
    def _hosts(g: _Guard, kind: _Signature) -> bool:
        gpus, cpu, memory = kind
        usable = sum(n for model, n in gpus if g.models is None or model in g.models)
        return usable >= g.gpus and cpu >= g.cpu_milli and memory >= g.memory_mib

    def _set(self, name: str, mask: int) -> None:
        old = self._able.get(name, 0)
        if mask == old:
            return
        self._able[name] = mask
        for i in range(len(self._guards)):
            self._counts[i] += (mask >> i & 1) - (old >> i & 1)
        self._switch()

    def _switch(self) -> None:
        if not self._settled:
            return
        active = self._active
        for i, keep in enumerate(self._keep):
            if self._counts[i] <= keep:
                active |= 1 << i
            elif self._counts[i] > 2 * keep:
                active &= ~(1 << i)
        if active != self._active:
            self._active = active
            self._generation += 1
