"""Memoised policy evaluations, so a scheduling cycle over 1213 nodes is mostly look-ups.

Three shortcuts, cheapest first, each giving exactly what the policy would:

1. certain rejection: a node summary (`assign.Capacity`, once per node version) against the
   pod's `assign.Demand` (once per pod) proves most misfits (not enough CPU, no idle GPU for a
   whole-GPU pod, no GPU with the share free) without building slots or scoring; only for
   policies whose fit rules are `host_fit` + `assign` (`Policy.standard_fit`);
2. per node: the last result for (policy, pod shape), valid while the node's `version` and the
   policy's `epoch` are unchanged;
3. per node state: nodes in the same state (GPU indices included) get the same evaluation, so
   idle nodes of one type are scored once per shape and epoch, not once per node. A state is
   interned to an int once per node version, and (policy, pod shape) once per request:
   hashing the nested tuples for every (node, shape) look-up cost more than the look-up.

Nodes no shortcut answers go to the policy together, one per state (`evaluate_many`; the
fragmentation policies vectorise them). `evaluate` is `evaluate_many` of one node, so both
take the same path. The per-node loop is written out inline: it runs once per candidate node
of every pod shape new to the extender, and function calls there were a quarter of its cost.

Not thread-safe: callers serialise (the extender's state lock).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from tessera.alloc.assign import Capacity, Demand, capacity_of
from tessera.alloc.model import FitFailure, NodeState, PodRequest
from tessera.alloc.policy import Evaluation, Policy

Result = Evaluation | FitFailure
_CacheEntry = tuple[int, int, Result]  # (node version, policy epoch, result)
_Key = int  # interned (policy, pod shape): hashing the nested shape tuple per node cost more than the look-up
_STATE_CACHE_LIMIT = 200_000  # entries of the by-state cache (and of interned states) before a reset
_PER_NODE_LIMIT = 4096  # shapes remembered per node; pod shapes are unbounded over a cluster's life


class _NodeInfo:
    """What is derived from one version of a node."""

    __slots__ = ("version", "capacity", "state")

    def __init__(self, version: int, capacity: Capacity) -> None:
        self.version = version
        self.capacity = capacity
        self.state = -1  # interned state id; -1 until a policy evaluation needs it


class EvaluationCache:
    def __init__(self) -> None:
        self._per_node: dict[str, dict[_Key, _CacheEntry]] = {}
        self._by_state: dict[tuple[_Key, int], tuple[int, Result]] = {}
        self._key_ids: dict[tuple[object, ...], _Key] = {}
        self._info: dict[str, _NodeInfo] = {}
        self._state_ids: dict[tuple[object, ...], int] = {}
        # ids are never reused, so an id still held by a node or a by-state key always means
        # the state it was given for, even after `_state_ids` was reset
        self._next_state = 0
        self._next_key = 0

    def forget(self, name: str) -> None:
        """The node was replaced or removed: its per-node results must not be served again."""
        self._per_node.pop(name, None)
        self._info.pop(name, None)

    def clear(self) -> None:
        self._per_node.clear()
        self._by_state.clear()
        self._info.clear()
        self._state_ids.clear()
        self._key_ids.clear()

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
        epoch = impl.epoch
        demand = Demand.of(pod) if impl.standard_fit else None
        # the shortcuts in order, inline: this loop runs once per candidate node of every new pod shape
        info_of, per_nodes, by_state = self._info, self._per_node, self._by_state
        missing: list[tuple[NodeState, dict[_Key, _CacheEntry], int]] = []
        for name in names:
            node = nodes.get(name)
            if node is None:
                out[name] = unknown
                continue
            version = node.version
            info = info_of.get(name)
            if info is None or info.version != version:
                info = info_of[name] = _NodeInfo(version, capacity_of(node))
            if demand is not None:
                failure = demand.reject(info.capacity)
                if failure is not None:
                    out[name] = failure
                    continue
            per_node = per_nodes.get(name)
            if per_node is None:
                per_node = per_nodes[name] = {}
            hit = per_node.get(key)
            if hit is not None and hit[0] == version and hit[1] == epoch:
                out[name] = hit[2]
                continue
            if info.state < 0:
                info.state = self._intern(node)
            shared = by_state.get((key, info.state))
            if shared is not None and shared[0] == epoch:
                out[name] = shared[1]
                self._remember(per_node, key, version, epoch, shared[1])
                continue
            out[name] = None  # type: ignore[assignment]  # placeholder: keeps the order of `names`
            missing.append((node, per_node, info.state))
        if missing:
            # one evaluation per state, as the by-state cache gives one by one
            todo: dict[int, NodeState] = {}
            for node, _, state in missing:
                todo.setdefault(state, node)
            batch = getattr(impl, "evaluate_many", None)
            nodes_todo = list(todo.values())
            results = batch(nodes_todo, pod) if batch is not None else [impl.evaluate(node, pod) for node in nodes_todo]
            if len(by_state) + len(todo) > _STATE_CACHE_LIMIT:
                by_state.clear()
            answers = dict(zip(todo, results))
            for state, result in answers.items():
                by_state[(key, state)] = (epoch, result)
            remember = self._remember
            for node, per_node, state in missing:
                result = answers[state]
                remember(per_node, key, node.version, epoch, result)
                out[node.name] = result
        return out

    def _key_id(self, impl: Policy, pod: PodRequest) -> _Key:
        key = (impl.name, pod.shape)
        found = self._key_ids.get(key)
        if found is None:
            if len(self._key_ids) >= _STATE_CACHE_LIMIT:
                self._key_ids.clear()
            # never reused, as state ids: an entry made under an id dropped by a reset is never hit
            found = self._key_ids[key] = self._next_key
            self._next_key += 1
        return found

    @staticmethod
    def _remember(per_node: dict[_Key, _CacheEntry], key: _Key, version: int, epoch: int, result: Result) -> None:
        if len(per_node) >= _PER_NODE_LIMIT:
            per_node.clear()
        per_node[key] = (version, epoch, result)

    def _intern(self, node: NodeState) -> int:
        """An id for everything a policy may look at, except the node's name."""
        state = (
            tuple((g.index, g.model, g.memory_mib, g.healthy, g.used_milli, g.used_memory_mib, g.offline_milli, g.shares) for g in node.gpus),
            node.cpu_milli, node.memory_mib, node.used_cpu_milli, node.used_memory_mib, node.gpu_placement, node.max_shares_per_gpu,
        )
        found = self._state_ids.get(state)
        if found is None:
            if len(self._state_ids) >= _STATE_CACHE_LIMIT:
                self._state_ids.clear()
            found = self._state_ids[state] = self._next_state
            self._next_state += 1
        return found
