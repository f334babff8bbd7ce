"""Memoised policy evaluations, so a scheduling cycle over 1213 nodes is mostly look-ups.

Three shortcuts, cheapest first, each giving exactly what the policy would:

1. certain rejection: a node summary (`assign.Capacity`, once per node version) against the
   pod's `assign.Demand` (once per pod) proves most misfits (not enough CPU, no idle GPU for a
   whole-GPU pod, no GPU with the share free) without building slots or scoring; only for
   policies whose fit rules are `host_fit` + `assign` (`Policy.standard_fit`). From 64
   candidates on, the summaries are read from arrays (`CapacityTable`) in one numpy pass;
2. per node: the last result for (policy, epoch, pod shape), kept with what is derived from the
   node's current `version` (a change drops them all);
3. per node state: nodes in the same state (GPU indices included) get the same evaluation, so
   idle nodes of one type are scored once per shape and epoch, not once per node. A state is
   interned to an int once per node version, and (policy, epoch, pod shape) once per request:
   hashing the nested tuples for every (node, shape) look-up cost more than the look-up, and
   with the epoch in the key an entry is the result alone (no tuple for the cyclic collector
   to walk: at 5,000 nodes a request for a new shape ran 4-10 young-generation collections).

From 64 candidates on, the nodes that pass shortcut 1 go to shortcut 3 straight from their
`CapacityTable` row, which holds the interned state too: one look-up each, in C, and no walk
over their node, summary and result objects (cold in the CPU cache at 5,000 nodes). Shortcut 2
serves the nodes without a current row.

What a node's version gives (summary, row, interned state) is derived when it changes
(`prepare`, called by `Cluster`), while its objects are warm in the CPU cache and no request
waits for it.

Nodes no shortcut answers go to the policy together, one per state (`evaluate_many`; the
fragmentation policies vectorise them). `evaluate` is `evaluate_many` of one node, so both
take the same path. The per-node loop is written out inline: it runs once per candidate node
of every pod shape new to the extender, and function calls there were a quarter of its cost.

Not thread-safe: callers serialise (the extender's state lock).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import cast

import numpy as np

from tessera.alloc.assign import Capacity, Demand, capacity_of
from tessera.alloc.capacity_table import CPU, GPU, MEMORY, PASS, UNDECIDED, CapacityTable
from tessera.alloc.interning import IdTable
from tessera.alloc.model import FitFailure, NodeState, PodRequest
from tessera.alloc.policy import Evaluation, Policy

Result = Evaluation | FitFailure
_Key = int  # interned (policy, epoch, pod shape)
_STATE_CACHE_LIMIT = 200_000  # entries of the by-state cache (and of interned states and keys) before a reset
_PER_NODE_LIMIT = 4096  # shapes remembered per node version; pod shapes are unbounded over a cluster's life
_TABLE_MIN = 64  # candidate nodes from which the rejections are made in one numpy pass (`CapacityTable`)
# code -> what `evaluate_many` answers without looking further (None: the node needs a look)
_DECIDED = tuple({CPU: FitFailure.CPU, MEMORY: FitFailure.MEMORY, GPU: FitFailure.GPU}.get(code) for code in range(UNDECIDED + 1))


class _NodeInfo:
    """What is derived from one version of a node: its capacity summary, its interned state and
    the results of the shapes evaluated on it."""

    __slots__ = ("version", "capacity", "state", "results")

    def __init__(self, version: int, capacity: Capacity) -> None:
        self.version = version
        self.capacity = capacity
        self.state = -1  # interned state id; -1 until a policy evaluation needs it
        self.results: dict[_Key, Result] = {}


class EvaluationCache:
    def __init__(self) -> None:
        self._by_state: dict[int, Result] = {}  # (key << 40 | state): an int key is no object to walk
        self._keys = IdTable(_STATE_CACHE_LIMIT)
        self._info: dict[str, _NodeInfo] = {}
        self._states = IdTable(_STATE_CACHE_LIMIT)
        self._table = CapacityTable()

    def prepare(self, node: NodeState) -> None:
        """Derive what a request would need of this new version of the node now (capacity summary,
        its `CapacityTable` row, interned state): at a change the node's objects are in the CPU
        cache and nothing waits, while in a request a pod shape new to hundreds of candidates
        paid for each of them cold (at 5,000 nodes ~50 of ~130 us per node, docs/benchmarks.md).

        Contract: once a node was prepared, every later change of it is prepared too (`Cluster`
        does so on every change), since its row answers for it without a look at the node. A
        node never prepared goes the per-node way, which compares versions."""
        info = self._info.get(node.name)
        if info is None or info.version != node.version:
            info = self._info[node.name] = _NodeInfo(node.version, capacity_of(node))
        if info.state < 0:
            info.state = self._intern(node)
        self._table.set(node.name, info.capacity, info.state)

    def forget(self, name: str) -> None:
        """The node was replaced or removed: its per-node results must not be served again."""
        self._info.pop(name, None)
        self._table.forget(name)

    def clear(self) -> None:
        """Drop every result (the policy object was replaced). The capacity rows stay: they
        describe the nodes, not a policy's view of them."""
        self._by_state.clear()
        self._info.clear()
        self._states.clear()
        self._keys.clear()

    def evaluate(self, impl: Policy, node: NodeState, pod: PodRequest) -> Result:
        if not impl.cacheable:
            return impl.evaluate(node, pod)
        return self.evaluate_many(impl, {node.name: node}, pod, (node.name,))[node.name]

    def evaluate_many(self, impl: Policy, nodes: Mapping[str, NodeState], pod: PodRequest, names: Iterable[str]) -> dict[str, Result]:
        """`evaluate` for each name (UNKNOWN_NODE where `nodes` lacks it), with the per-pod work
        done once and the nodes no cache answers handed to the policy together (`evaluate_many`
        of a policy that has one: the fragmentation policies vectorise them)."""
        out: dict[str, Result] = {}
        unknown = FitFailure.UNKNOWN_NODE
        if not impl.cacheable:
            for name in names:
                node = nodes.get(name)
                out[name] = unknown if node is None else impl.evaluate(node, pod)
            return out
        key = self._key_id(impl, pod)
        demand = Demand.of(pod) if impl.standard_fit else None
        by_state = self._by_state
        # nodes that passed the table's rejections, by their row's state (shortcut 3 straight
        # from the array): their names and states, and the names of those no state has a result for
        rowed: list[str] = []
        rowed_states: list[int] = []
        if demand is not None and demand.models is None:
            names = names if isinstance(names, list) else list(names)
            if len(names) >= _TABLE_MIN:
                # shortcut 1 for every node at once; the loop below gets the others
                codes, states = self._table.lookup(names, demand)
                out = dict(zip(names, map(_DECIDED.__getitem__, codes.tolist())))  # type: ignore[arg-type]  # None: decided below, the order of `names` kept
                passed = np.flatnonzero((codes == PASS) & (states >= 0)).tolist()
                if passed:
                    rowed = [names[i] for i in passed]
                    rowed_states = states[passed].tolist()
                    look_up = cast(Callable[[int], Result | None], by_state.get)
                    out.update(zip(rowed, map(look_up, map((key << 40).__or__, rowed_states))))  # type: ignore[arg-type]  # None where no state has a result: filled after the batch below
                undecided = codes == UNDECIDED
                names = [names[i] for i in np.flatnonzero(undecided | ((codes == PASS) & (states < 0))).tolist()]
                if not undecided.any():
                    demand = None  # every name left passed it already
        # the shortcuts in order, inline: this loop runs once per candidate node of every new pod shape
        info_of = self._info
        missing: list[NodeState] = []  # and their infos: parallel lists, no tuple per node
        missing_info: list[_NodeInfo] = []
        for name in names:
            node = nodes.get(name)
            if node is None:
                out[name] = unknown
                continue
            info = info_of.get(name)
            if info is None or info.version != node.version:
                info = info_of[name] = _NodeInfo(node.version, capacity_of(node))
            if demand is not None:
                failure = demand.reject(info.capacity)
                if failure is not None:
                    out[name] = failure
                    continue
            hit = info.results.get(key)
            if hit is not None:
                out[name] = hit
                continue
            if info.state < 0:
                info.state = self._intern(node)
            shared = by_state.get(key << 40 | info.state)
            if shared is not None:
                out[name] = shared
                self._remember(info, key, shared)
                continue
            out[name] = None  # type: ignore[assignment]  # filled after the batch below; keeps the order of `names`
            missing.append(node)
            missing_info.append(info)
        # one evaluation per state, as the by-state cache gives one by one
        todo: dict[int, NodeState] = {}
        rowed_missing: list[tuple[str, int]] = []
        for name, state in zip(rowed, rowed_states):
            if out[name] is None:
                node = nodes.get(name)
                if node is None:  # a row is dropped (`forget`) when its node goes: not reached
                    out[name] = unknown
                    continue
                todo.setdefault(state, node)
                rowed_missing.append((name, state))
        for node, info in zip(missing, missing_info):
            todo.setdefault(info.state, node)
        if todo:
            batch = getattr(impl, "evaluate_many", None)
            nodes_todo = list(todo.values())
            results = batch(nodes_todo, pod) if batch is not None else [impl.evaluate(node, pod) for node in nodes_todo]
            if len(by_state) + len(todo) > _STATE_CACHE_LIMIT:
                by_state.clear()
            answers = dict(zip(todo, results))
            base = key << 40
            for state, result in answers.items():
                by_state[base | state] = result
            for name, state in rowed_missing:
                out[name] = answers[state]
            for node, info in zip(missing, missing_info):
                result = answers[info.state]
                results_of = info.results
                if len(results_of) >= _PER_NODE_LIMIT:
                    results_of.clear()
                results_of[key] = result  # `_remember`, inline: once per node of a new shape
                out[node.name] = result
        return out

    def _key_id(self, impl: Policy, pod: PodRequest) -> _Key:
        """The id of (policy, its epoch now, pod shape): a new epoch gives new ids, so entries
        made under an old one are never hit again (they go with the node's next version, the
        per-node bound or the by-state reset)."""
        return self._keys.id_of((impl.name, impl.epoch, pod.shape))

    @staticmethod
    def _remember(info: _NodeInfo, key: _Key, result: Result) -> None:
        if len(info.results) >= _PER_NODE_LIMIT:
            info.results.clear()
        info.results[key] = result

    def _intern(self, node: NodeState) -> int:
        """An id for everything a policy may look at, except the node's name."""
        state = (
            tuple((g.index, g.model, g.memory_mib, g.healthy, g.used_milli, g.used_memory_mib, g.offline_milli, g.shares) for g in node.gpus),
            node.cpu_milli, node.memory_mib, node.used_cpu_milli, node.used_memory_mib, node.gpu_placement, node.max_shares_per_gpu,
        )
        return self._states.id_of(state)
