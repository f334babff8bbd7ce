"""How hard the pods that may only use some GPU models press on each model.

Pods may name the GPU models they accept (`gpu_models`). When the pods limited to a model ask for
more of it than the cluster has, every GPU of that model given to a pod that could have run
elsewhere is a limited pod failing later; FGD's node-local measure does not see this (taking one
of two idle T4s leaves the node able to host a T4 pod, so nothing looks fragmented).

`ModelPressure.cost(model)` is the expected loss, in milli-GPU per milli-GPU taken, of using a GPU
of `model`: the limited pods' share of the mix's GPU demand that falls on the model, over the
model's share of the cluster's healthy GPUs, capped at 1 (at 1 the limited pods alone would use
up the model). A pod limited to several models has its demand spread over them by their sizes.
With no limited pods in the mix every cost is 0 and placements are unchanged.

That steady cost is small where a model is plentiful (openb gpuspec05: T4-only pods are 2.5 % of
the pods, T4s 13.5 % of the GPUs: cost 0.2), yet the CPU-rich 2-GPU T4 nodes attract any-model pods
(host stranding, the node-size tie-break) until no T4 is left at 50 % arrived and every later
T4-only pod fails. So a model is also *protected* once its free compute falls to `protect_factor`
(default 4, `FragAwareSettings.model_protect_factor`) times what the pods limited to it are
expected to take of the cluster's free compute (their share of the mix's GPU demand times the
free compute of all healthy GPUs): while protected its cost is 1, a whole placement's worth. It
stays protected until its free compute is above twice that, so binds and releases around the
threshold do not flush every cache. At factor 2 the 2-GPU P100 nodes of gpuspec05 were full of
any-model pods before the protection switched on, and P100-only pods failed from 20 % arrived.

The costs depend on the mix snapshot, on the inventory (GPUs per model) and on which models are
protected, so `generation` moves whenever a node's healthy GPUs per model change or a model's
protection switches; other binds and releases never move it. Without limited pods in the mix
nothing is tracked and every cost is 0.
"""
from __future__ import annotations

from tessera.alloc.model import NodeState
from tessera.alloc.workload import MixSnapshot


class ModelPressure:
    def __init__(self, snapshot: MixSnapshot, protect_factor: float = 4.0) -> None:
        """`protect_factor`: a model is protected once its free compute is at most this many times
        its limited pods' expected take (released above twice that)."""
        self._factor = protect_factor
        total = 0.0
        self._limited: list[tuple[frozenset[str], float]] = []  # (models, share of the mix's GPU demand)
        for s in snapshot.shapes:
            demand = s.weight * s.gpu_count * s.gpu_milli
            total += demand
            if s.gpu_models is not None and demand > 0:
                self._limited.append((s.gpu_models, demand))
        self._limited = [(models, demand / total) for models, demand in self._limited] if total > 0 else []
        if snapshot.limited:
            # the whole limited demand, rare shapes included (they are most of it)
            self._limited = list(snapshot.limited)
        self._gpus: dict[str, dict[str, int]] = {}  # node -> healthy GPUs per model
        self._supply: dict[str, int] = {}
        self._costs: dict[str, float] | None = {}
        self._free_of: dict[str, dict[str, int]] = {}  # node -> free milli of its healthy GPUs per model
        self._free: dict[str, int] = {}  # model -> free milli, cluster-wide
        self._free_total = 0
        self._protected: frozenset[str] = frozenset()
        self._settled = False  # False until the first cost is read (the inventory is tracked by then)
        self._asked_cache: dict[str, float] | None = None
        self.generation = 0

    def __bool__(self) -> bool:
        return bool(self._limited)

    def track(self, node: NodeState) -> None:
        if not self._limited:
            return
        counts: dict[str, int] = {}
        free: dict[str, int] = {}
        for g in node.gpus:
            if g.healthy:
                counts[g.model] = counts.get(g.model, 0) + 1
                free[g.model] = free.get(g.model, 0) + g.free_milli
        if self._gpus.get(node.name) != counts:
            self._move(node.name, counts)
        self._set_free(node.name, free)

    def forget(self, name: str) -> None:
        if self._limited and name in self._gpus:
            self._move(name, {})
            del self._gpus[name]
            self._set_free(name, {})
            del self._free_of[name]

    def cost(self, model: str) -> float:
        if not self._settled:
            self._settled = True
            asked = self._asked()
            self._protected = frozenset(m for m, share in asked.items() if self._free.get(m, 0) <= self._factor * share * self._free_total)
        if model in self._protected:
            return 1.0
        costs = self._costs
        if costs is None:
            costs = self._costs = self._compute()
        return costs.get(model, 0.0)

    def _move(self, name: str, counts: dict[str, int]) -> None:
        for model, n in self._gpus.get(name, {}).items():
            self._supply[model] -= n
        for model, n in counts.items():
            self._supply[model] = self._supply.get(model, 0) + n
        self._gpus[name] = counts
        self._costs = None
        self._asked_cache = None
        self.generation += 1

    def _set_free(self, name: str, free: dict[str, int]) -> None:
        old = self._free_of.get(name, {})
        if old == free:
            return
        for model, milli in old.items():
            self._free[model] -= milli
            self._free_total -= milli
        for model, milli in free.items():
            self._free[model] = self._free.get(model, 0) + milli
            self._free_total += milli
        self._free_of[name] = free
        self._switch()

    def _switch(self) -> None:
        """Protect a model at free <= 2 x its limited pods' expected take, release it above 4 x."""
        if not self._settled:
            return
        asked = self._asked()
        protected = set(self._protected)
        for model, share in asked.items():
            expected = share * self._free_total
            free = self._free.get(model, 0)
            if free <= self._factor * expected:
                protected.add(model)
            elif free > 2 * self._factor * expected:
                protected.discard(model)
        if protected != self._protected:
            self._protected = frozenset(protected)
            self.generation += 1

    def _asked(self) -> dict[str, float]:
        """Share of the mix's GPU demand that the limited pods put on each model (split over the
        models a pod accepts by their sizes)."""
        if self._asked_cache is not None:
            return self._asked_cache
        supply = {m: n for m, n in self._supply.items() if n > 0}
        asked: dict[str, float] = {}
        for models, share in self._limited:
            sizes = {m: supply[m] for m in models if m in supply}
            room = sum(sizes.values())
            for m, n in sizes.items():
                asked[m] = asked.get(m, 0.0) + share * n / room
        self._asked_cache = asked
        return asked

    def _compute(self) -> dict[str, float]:
        supply = {m: n for m, n in self._supply.items() if n > 0}
        everything = sum(supply.values())
        if not everything:
            return {}
        return {m: min(1.0, a / (supply[m] / everything)) for m, a in self._asked().items()}
