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
   to walk: at 5,000 nodes a request for a new shape would run 4-10 young-generation collections).

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
of every pod shape new to the extender, and function calls there would be a quarter of its cost.

Memory: every map is bounded in bytes (`EvaluationBudget`), estimated as entries are added: a
result as `RESULT_BYTES` plus `ASSIGNMENT_BYTES` per GPU container of its pod (an evaluation
holds the GPU indices of each container), an interned value by `interning.approx_bytes`. A map
past its budget starts again empty; nothing but speed depends on what a cache remembers. Only
nodes of the inventory get per-node entries: a name the caller does not know is answered
UNKNOWN_NODE and leaves nothing behind.

Not thread-safe: callers serialise (the extender's state lock).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, cast

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
MiB: Final = 1024 * 1024
_STATE_BITS: Final = 40


def by_state_base(key: int) -> int:
    """The by-state cache's key of (`key`, state 0); OR a state id into it for that state's.

    (policy, epoch, pod shape) id and node state id packed into one int, because the map is read
    once per candidate node, and an int hashes without a tuple to build and is no object for the
    cyclic collector to walk. State ids (`IdTable`, one per interned node state) stay below
    2**40, a trillion states."""
    return key << _STATE_BITS

RESULT_BYTES: Final = 300
"""Estimated bytes of one cached result of a one-container pod, by whichever map holds it last:
the dict slot and int key (~100 in the by-state map, ~46 per node) and the evaluation, which is
shared until one map drops it (`Evaluation`, its score tuple, its assignment). Measured with
tracemalloc over 1,000 loaded 8-GPU nodes: 113-116 bytes per by-state result with the
fragmentation policies, 280 with binpack and spread (a score tuple per result); 46 per per-node
entry (tests/tessera/alloc/test_alloc_cache_budgets.py re-measures them)."""
STATE_BYTES: Final = 300
STATE_GPU_BYTES: Final = 140
"""Estimated bytes of one interned node state: `STATE_BYTES` (its outer tuples, the table's slot
and id) plus `STATE_GPU_BYTES` per GPU (an 8-field tuple, 104 bytes, and the fields that changed
since the node's previous state). Measured with tracemalloc: 1,078 bytes per 8-GPU state no node
holds any more, against 1,420 estimated."""
ASSIGNMENT_BYTES: Final = 80
"""Estimated bytes per further GPU container in a result's assignment (a tuple of GPU indices:
48 bytes and 8 per GPU); a one-GPU container's is a shared constant, so this is an upper bound."""


@dataclass(frozen=True)
class EvaluationBudget:
    """Byte budgets of the evaluation cache's maps (estimated as entries are added; a map past
    its budget starts again empty).

    by_state: default 64 MiB: results per (policy, epoch, pod shape) and node state, ~220,000
        results of one-container pods (for those the entry limit of 200,000 is reached first).
        Past it the next batch evaluates afresh.
    per_node: default 64 MiB over all nodes together: the results kept per node version (nodes
        without a current `CapacityTable` row, pods asking for GPU models), ~220,000 results.
    states: default 64 MiB of interned node states (an 8-GPU node's estimated at 1.4 KiB:
        ~47,000 distinct states, against the 200,000-entry limit; the 41,769 binds that fill
        5,000 nodes to 90 % in bench/scale.py intern 19,790, 28 MiB).
    keys: default 16 MiB of interned (policy, epoch, pod shape) keys (~0.6 KiB for a
        one-container shape: ~27,000 shapes).
    """

    by_state: int = 64 * MiB
    per_node: int = 64 * MiB
    states: int = 64 * MiB
    keys: int = 16 * MiB


def _state_bytes(state: Hashable) -> int:
    """The estimate of an interned node state (`EvaluationCache._intern`), by formula: walking
    its ~80 objects (`interning.approx_bytes`) cost ~20 us per node change, the formula nothing."""
    return STATE_BYTES + STATE_GPU_BYTES * len(cast(tuple[tuple[object, ...], ...], state)[0])


def result_bytes(pod: PodRequest) -> int:
    """The estimate of one cached result for `pod` (see `RESULT_BYTES`)."""
    return RESULT_BYTES + ASSIGNMENT_BYTES * max(0, len(pod.gpu_containers) - 1)


class _NodeInfo:
    """What is derived from one version of a node: its capacity summary, its interned state and
    the results of the shapes evaluated on it (`bytes`: their estimate)."""

    __slots__ = ("version", "capacity", "state", "results", "bytes")

    def __init__(self, version: int, capacity: Capacity) -> None:
        self.version = version
        self.capacity = capacity
        self.state = -1  # interned state id; -1 until a policy evaluation needs it
        self.results: dict[_Key, Result] = {}
        self.bytes = 0


class EvaluationCache:
    def __init__(self, budget: EvaluationBudget = EvaluationBudget()) -> None:
        self._budget = budget
        self._by_state: dict[int, Result] = {}  # by `by_state_base(key) | state`
        self._by_state_bytes = 0
        self._keys = IdTable(_STATE_CACHE_LIMIT, budget.keys)
        self._info: dict[str, _NodeInfo] = {}
        self._per_node_bytes = 0  # over every info's results
        self._states = IdTable(_STATE_CACHE_LIMIT, budget.states, size_of=_state_bytes)
        self._table = CapacityTable()

    def estimated_bytes(self) -> dict[str, int]:
        """Per bounded map, what it holds now by the estimate its budget is kept with."""
        return {
            "by_state": self._by_state_bytes,
            "per_node": self._per_node_bytes,
            "states": self._states.estimated_bytes,
            "keys": self._keys.estimated_bytes,
        }

    def prepare(self, node: NodeState) -> None:
        """Derive what a request would need of this new version of the node now (capacity summary,
        its `CapacityTable` row, interned state): at a change the node's objects are in the CPU
        cache and nothing waits, while in a request a pod shape new to hundreds of candidates
        would pay for each of them cold (at 5,000 nodes ~50 of ~130 us per node, docs/benchmarks.md).

        Contract: once a node was prepared, every later change of it is prepared too (`Cluster`
        does so on every change), since its row answers for it without a look at the node. A
        node never prepared goes the per-node way, which compares versions."""
        info = self._info.get(node.name)
        if info is None or info.version != node.version:
            if info is not None:
                self._per_node_bytes -= info.bytes
            info = self._info[node.name] = _NodeInfo(node.version, capacity_of(node))
        if info.state < 0:
            info.state = self._intern(node)
        self._table.set(node.name, info.capacity, info.state)

    def forget(self, name: str) -> None:
        """The node was replaced or removed: its per-node results must not be served again."""
        info = self._info.pop(name, None)
        if info is not None:
            self._per_node_bytes -= info.bytes
        self._table.forget(name)

    def clear(self) -> None:
        """Drop every result (the policy object was replaced). The capacity rows stay: they
        describe the nodes, not a policy's view of them."""
        self._by_state.clear()
        self._by_state_bytes = 0
        self._info.clear()
        self._per_node_bytes = 0
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
        base = by_state_base(key)
        size = result_bytes(pod)
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
                    out.update(zip(rowed, map(look_up, map(base.__or__, rowed_states))))  # type: ignore[arg-type]  # None where no state has a result: filled after the batch below
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
                if info is not None:
                    self._per_node_bytes -= info.bytes
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
            shared = by_state.get(base | info.state)
            if shared is not None:
                out[name] = shared
                self._remember(info, key, shared, size)
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
            results = impl.evaluate_many(list(todo.values()), pod)
            added = size * len(todo)
            if len(by_state) + len(todo) > _STATE_CACHE_LIMIT or self._by_state_bytes + added > self._budget.by_state:
                by_state.clear()
                self._by_state_bytes = 0
            answers = dict(zip(todo, results))
            if added <= self._budget.by_state:
                for state, result in answers.items():
                    by_state[base | state] = result
                self._by_state_bytes += added
            for name, state in rowed_missing:
                out[name] = answers[state]
            for node, info in zip(missing, missing_info):
                result = answers[info.state]
                results_of = info.results
                if len(results_of) >= _PER_NODE_LIMIT:
                    results_of.clear()
                    self._per_node_bytes -= info.bytes
                    info.bytes = 0
                results_of[key] = result  # `_remember`, inline: once per node of a new shape
                info.bytes += size
                out[node.name] = result
            self._per_node_bytes += size * len(missing)
            if self._per_node_bytes > self._budget.per_node:
                self._drop_per_node()
        return out

    def _key_id(self, impl: Policy, pod: PodRequest) -> _Key:
        """The id of (policy, its epoch now, pod shape): a new epoch gives new ids, so entries
        made under an old one are never hit again (they go with the node's next version, the
        per-node bound or the by-state reset)."""
        return self._keys.id_of((impl.name, impl.epoch, pod.shape))

    def _remember(self, info: _NodeInfo, key: _Key, result: Result, size: int) -> None:
        if len(info.results) >= _PER_NODE_LIMIT:
            info.results.clear()
            self._per_node_bytes -= info.bytes
            info.bytes = 0
        info.results[key] = result
        info.bytes += size
        self._per_node_bytes += size
        if self._per_node_bytes > self._budget.per_node:
            self._drop_per_node()

    def _drop_per_node(self) -> None:
        """Every node's results go (the budget is for all nodes together; which node's results
        will be asked for again is not known). Summaries, rows and states stay: they describe
        the nodes, once each."""
        for info in self._info.values():
            if info.results:
                info.results = {}
                info.bytes = 0
        self._per_node_bytes = 0

    def _intern(self, node: NodeState) -> int:
        """An id for everything a policy may look at, except the node's name."""
        state = (
            tuple((g.index, g.model, g.memory_mib, g.healthy, g.used_milli, g.used_memory_mib, g.offline_milli, g.shares) for g in node.gpus),
            node.cpu_milli, node.memory_mib, node.used_cpu_milli, node.used_memory_mib, node.gpu_placement, node.max_shares_per_gpu,
        )
        return self._states.id_of(state)
