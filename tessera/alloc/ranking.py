"""Finding the best node without rescoring every node for every pod.

For each (policy, pod shape) a lazy max-heap holds the evaluations of the nodes. Every node
change is appended to a change log; when a pod of that shape is scheduled, only the nodes changed
since the shape was last scheduled are evaluated again and pushed, and stale heap entries (older
node version) are dropped when they reach the top. Replaying the 10,860-pod default trace on
1213 nodes thus costs a few evaluations per pod instead of 1213.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tessera.alloc.model import FitFailure, NodeState
from tessera.alloc.policy import Evaluation

_LOG_LIMIT = 200_000  # entries; past this every heap is rebuilt from scratch (bounded memory)

_Entry = tuple[tuple[float, ...], int, str, int]  # (negated key, tie rank, node, node version)


@dataclass
class _ShapeHeap:
    epoch: int
    seen: int
    heap: list[_Entry] = field(default_factory=list)


class BestNodeIndex:
    def __init__(self) -> None:
        self._log: list[str] = []
        self._heaps: dict[tuple[object, ...], _ShapeHeap] = {}

    def touched(self, name: str) -> None:
        self._log.append(name)
        if len(self._log) > _LOG_LIMIT:
            self._log.clear()
            self._heaps.clear()

    def best(
        self,
        key: tuple[object, ...],
        epoch: int,
        nodes: Mapping[str, NodeState],
        rank: Mapping[str, int],
        evaluate: Callable[[str], Evaluation | FitFailure],
        evaluate_many: Callable[[list[str]], Mapping[str, Evaluation | FitFailure]] | None = None,
    ) -> tuple[str, Evaluation] | None:
        """`evaluate_many`: the same answers for many nodes at once (after a new epoch every node
        is evaluated again; a policy may do that faster together)."""
        h = self._heaps.get(key)
        if h is None or h.epoch != epoch:
            h = _ShapeHeap(epoch, len(self._log))
            self._heaps[key] = h
            names = list(nodes)
        else:
            names = list(dict.fromkeys(self._log[h.seen :]))
            h.seen = len(self._log)
        heap = h.heap
        known = [name for name in names if name in nodes]
        results = evaluate_many(known) if evaluate_many is not None else {name: evaluate(name) for name in known}
        for name in known:
            result = results[name]
            if not isinstance(result, FitFailure):
                heapq.heappush(heap, (tuple(-k for k in result.key), rank.get(name, 1 << 30), name, nodes[name].version))
        best: tuple[str, Evaluation] | None = None
        while heap:
            _, _, name, version = heap[0]
            top = nodes.get(name)
            if top is not None and top.version == version:
                result = evaluate(name)  # served from the per-node cache
                if not isinstance(result, FitFailure):
                    best = (name, result)
                    break
            heapq.heappop(heap)
        return best
