"""Per pod shape, the latest evaluation of every node, refreshed only where nodes changed.

kube-scheduler asks about every candidate node for every pod, but between two pods of the same
shape only the nodes touched by binds, releases or inventory updates can answer differently.
A view keeps one shape's answers and a position in the log of touched nodes; a request
re-evaluates just the nodes logged since (in one `Cluster.evaluate_many` batch), so a cycle over
1213 nodes is dict look-ups plus a handful of real evaluations. A new workload-mix epoch
(fragmentation scores moved) drops the view. Not thread-safe: the state lock guards it.

(Refreshing stale views ahead of time in a background thread was tried and measured worse on the
2-core development VM: it competes with the request threads for the lock and the GIL.)

Memory. A view keeps only the nodes the evaluation knows: a name answered `UNKNOWN_NODE` is
answered again by the next request that names it, so a request naming nodes that do not exist
costs memory only while it is served. All views together are held to a byte budget
(`ViewBudget`), estimated as entries are added (a measured size per entry plus the characters of
its node's name); past it the least recently used views are dropped, and a view that alone
exceeds it is not kept. The touched-node log is bounded in entries (a log entry is one reference
to a node's name). Interning the names (one string per node for all views) was measured: it
saved ~65 bytes per entry and cost ~100 ns per name added, +0.5 ms for a new shape over 5,000
nodes, so the names stay the requests' own.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_
from typing import Final

from tessera.alloc import Evaluation, FitFailure, PodRequest

Result = Evaluation | FitFailure

ENTRY_BYTES: Final = 260
"""Estimated bytes of one (view, node) entry besides the characters of the node's name (counted
apart: a view keeps the name string of the request that brought it): its share of the view's
dict (16-byte entries and their index, a third to two thirds full), the name string's header,
and an evaluation no cache but the views holds any more (`Evaluation`, its score tuple).
Measured with tracemalloc over 100 views of 2,000 loaded 8-GPU nodes named with 16 characters,
once the evaluation cache had let go: 149 bytes per entry with the fragmentation policy, 211 with
binpack, 271 with spread, against 276 estimated (tests/tessera/scheduler/test_extender_cache_budgets.py
re-measures it)."""
LOG_ENTRY_BYTES: Final = 8  # one reference in a list; the name it points to is the node's own


@dataclass(frozen=True)
class ViewBudget:
    """Bounds of the views.

    max_bytes: default 256 MiB for all views together: ~970,000 entries of 16-character node
        names, 194 shapes of 5,000 nodes. The busiest views of bench/scale.py at 5,000 nodes
        held 425,000 entries (98 shapes, 112 MiB by the estimate), those of bench/extender.py at
        1,213 nodes 146,000.
    shapes: default 512 views at most, least recently used dropped first.
    log_limit: default 200,000 touched-node log entries (1.6 MB) before every view is dropped.
    """

    max_bytes: int = 256 * 1024 * 1024
    shapes: int = 512
    log_limit: int = 200_000


@dataclass
class _View:
    epoch: int
    seen: int  # position in the touched-node log up to which `results` is current
    results: dict[str, Result] = field(default_factory=dict)
    bytes: int = 0  # the estimate of `results`


_UNKNOWN: Final = FitFailure.UNKNOWN_NODE


class EvaluationViews:
    def __init__(self, budget: ViewBudget = ViewBudget()) -> None:
        self._views: OrderedDict[tuple[object, ...], _View] = OrderedDict()
        self._log: list[str] = []
        self._budget = budget
        self._bytes = 0  # over all views

    @property
    def estimated_bytes(self) -> int:
        """What the views and the log hold now, by the estimate the budget is kept with."""
        return self._bytes + len(self._log) * LOG_ENTRY_BYTES

    @property
    def entries(self) -> int:
        return sum(len(view.results) for view in self._views.values())

    def touched(self, node: str) -> None:
        self._log.append(node)
        if len(self._log) > self._budget.log_limit:
            self._log.clear()
            self._views.clear()
            self._bytes = 0

    def evaluations(
        self, request: PodRequest, names: Iterable[str], epoch: int, evaluate: Callable[[PodRequest, list[str]], dict[str, Result]]
    ) -> dict[str, Result]:
        """The answer for every name; `evaluate` gets the names without a current answer, in one
        call, so its per-pod work is done once per request."""
        key = request.shape
        view = self._views.get(key)
        if view is None or view.epoch != epoch:
            if view is not None:
                self._bytes -= view.bytes
            view = _View(epoch, len(self._log))
            self._views[key] = view
            while len(self._views) > self._budget.shapes:
                self._bytes -= self._views.popitem(last=False)[1].bytes
        elif view.seen < len(self._log):
            results = view.results
            dropped = 0
            for name in set(self._log[view.seen :]):
                if results.pop(name, None) is not None:
                    dropped += ENTRY_BYTES + len(name)
            view.bytes -= dropped
            self._bytes -= dropped
            view.seen = len(self._log)
        self._views.move_to_end(key)
        results = view.results
        names = names if isinstance(names, list) else list(names)
        asked = set(names)
        complete = True  # every asked name is in `results`
        if not results.keys() >= asked:  # in C: most requests find every name answered
            fresh = evaluate(request, [name for name in names if name not in results])
            if any(map(is_, fresh.values(), repeat(_UNKNOWN))):  # in C; a Python loop only when some are unknown
                complete = False
                fresh = {name: result for name, result in fresh.items() if result is not _UNKNOWN}
            results.update(fresh)  # every name in `fresh` is new to the view
            added = ENTRY_BYTES * len(fresh) + sum(map(len, fresh))
            view.bytes += added
            self._bytes += added
            self._keep_within_budget()
        if not complete:
            # a name not in the view now was answered UNKNOWN_NODE just above
            return {name: results.get(name, _UNKNOWN) for name in names}
        if len(results) == len(asked):
            # every name answered and nothing else in the view: a copy (in C) is the same dict
            # (the view itself must not leave the lock: a later request drops touched nodes)
            return dict(results)
        return {name: results[name] for name in names}

    def _keep_within_budget(self) -> None:
        """Drop the least recently used views until the estimate is within the budget. The
        current view is the most recent, so it goes only when it alone is over the budget (its
        request still reads its dict, which dropping does not change)."""
        while self._bytes > self._budget.max_bytes and self._views:
            self._bytes -= self._views.popitem(last=False)[1].bytes
