"""Per pod shape, the latest evaluation of every node, refreshed only where nodes changed.

kube-scheduler asks about every candidate node for every pod, but between two pods of the same
shape only the nodes touched by binds, releases or inventory updates can answer differently.
A view keeps one shape's answers and a position in the log of touched nodes; a request
re-evaluates just the nodes logged since (in one `Cluster.evaluate_many` batch), so a cycle over
1213 nodes is dict look-ups plus a handful of real evaluations. A new workload-mix epoch
(fragmentation scores moved) drops the view. Not thread-safe: the state lock guards it.

(Refreshing stale views ahead of time in a background thread was tried and measured worse on the
2-core development VM: it competes with the request threads for the lock and the GIL.)
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tessera.alloc import Evaluation, FitFailure, PodRequest

Result = Evaluation | FitFailure


@dataclass
class _View:
    epoch: int
    seen: int  # position in the touched-node log up to which `results` is current
    results: dict[str, Result] = field(default_factory=dict)


class EvaluationViews:
    def __init__(self, *, shapes: int = 512, log_limit: int = 200_000) -> None:
        """`shapes`: views kept (least recently used dropped); `log_limit`: touched-node log
        entries before every view is dropped (bounded memory)."""
        self._views: OrderedDict[tuple[object, ...], _View] = OrderedDict()
        self._log: list[str] = []
        self._shapes = shapes
        self._log_limit = log_limit

    def touched(self, node: str) -> None:
        self._log.append(node)
        if len(self._log) > self._log_limit:
            self._log.clear()
            self._views.clear()

    def evaluations(
        self, request: PodRequest, names: Iterable[str], epoch: int, evaluate: Callable[[PodRequest, list[str]], dict[str, Result]]
    ) -> dict[str, Result]:
        """The answer for every name; `evaluate` gets the names without a current answer, in one
        call, so its per-pod work is done once per request."""
        key = request.shape
        view = self._views.get(key)
        if view is None or view.epoch != epoch:
            view = _View(epoch, len(self._log))
            self._views[key] = view
            while len(self._views) > self._shapes:
                self._views.popitem(last=False)
        elif view.seen < len(self._log):
            for name in set(self._log[view.seen :]):
                view.results.pop(name, None)
            view.seen = len(self._log)
        self._views.move_to_end(key)
        results = view.results
        names = names if isinstance(names, list) else list(names)
        asked = set(names)
        if not results.keys() >= asked:  # in C: most requests find every name answered
            results.update(evaluate(request, [name for name in names if name not in results]))
        if len(results) == len(asked):
            # every name answered and nothing else in the view: a copy (in C) is the same dict
            # (the view itself must not leave the lock: a later request drops touched nodes)
            return dict(results)
        return {name: results[name] for name in names}
