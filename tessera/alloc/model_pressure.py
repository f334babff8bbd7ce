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

The costs depend on the mix snapshot and on the inventory (GPUs per model), so `generation`
moves whenever a node's healthy GPUs per model change; binds and releases never move it.
"""
from __future__ import annotations

from tessera.alloc.model import NodeState
from tessera.alloc.workload import MixSnapshot


class ModelPressure:
    def __init__(self, snapshot: MixSnapshot) -> None:
        total = 0.0
        self._limited: list[tuple[frozenset[str], float]] = []  # (models, share of the mix's GPU demand)
        for s in snapshot.shapes:
            demand = s.weight * s.gpu_count * s.gpu_milli
            total += demand
            if s.gpu_models is not None and demand > 0:
                self._limited.append((s.gpu_models, demand))
        self._limited = [(models, demand / total) for models, demand in self._limited] if total > 0 else []
        self._gpus: dict[str, dict[str, int]] = {}  # node -> healthy GPUs per model
        self._supply: dict[str, int] = {}
        self._costs: dict[str, float] | None = {}
        self.generation = 0

    def __bool__(self) -> bool:
        return bool(self._limited)

    def track(self, node: NodeState) -> None:
        if not self._limited:
            return
        counts: dict[str, int] = {}
        for g in node.gpus:
            if g.healthy:
                counts[g.model] = counts.get(g.model, 0) + 1
        if self._gpus.get(node.name) != counts:
            self._move(node.name, counts)

    def forget(self, name: str) -> None:
        if self._limited and name in self._gpus:
            self._move(name, {})
            del self._gpus[name]

    def cost(self, model: str) -> float:
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
        self.generation += 1

    def _compute(self) -> dict[str, float]:
        supply = {m: n for m, n in self._supply.items() if n > 0}
        everything = sum(supply.values())
        if not everything:
            return {}
        asked: dict[str, float] = {}
        for models, share in self._limited:
            sizes = {m: supply[m] for m in models if m in supply}
            room = sum(sizes.values())
            for m, n in sizes.items():
                asked[m] = asked.get(m, 0.0) + share * n / room
        return {m: min(1.0, a / (supply[m] / everything)) for m, a in asked.items()}
