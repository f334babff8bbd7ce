"""The pool policy the extender applies to a node, written into the node's labels in the
allocation model (`NodeState.gpu_placement` / `max_shares_per_gpu` and the binder read them).

The policy comes from `tessera.model.pool_policy.read_pool_policy`, the reader the device plugin
and the node agent use too: the pools file entry wins where it states a setting, then the node's
label. A setting neither states keeps the allocation model's own behaviour for an unlabelled node
(the node-level placement policy's GPU order, no share cap), so nodes wired by hand place as
before; every node Tessera labels states them all.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from tessera.model.pool_policy import POLICY_LABELS, read_pool_policy

log = logging.getLogger(__name__)

_REPORTED_MAX: Final = 1024  # distinct problems logged once each; more are not remembered


class PolicyLabels:
    """Per-node labels with the pool policy applied; logs each unreadable setting once."""

    def __init__(self) -> None:
        self._reported: set[str] = set()

    def apply(self, node: str, labels: Mapping[str, str], document: Mapping[str, Any]) -> dict[str, str]:
        reading = read_pool_policy(labels, document)
        for problem in reading.problems:
            if problem not in self._reported and len(self._reported) < _REPORTED_MAX:
                self._reported.add(problem)
                log.warning("node %s: ignoring %s", node, problem)
        out = {k: v for k, v in labels.items() if k not in _LABELS}
        stated = reading.policy.node_labels()
        for name, label in POLICY_LABELS.items():
            if reading.sources[name] != "default" and label in stated:
                out[label] = stated[label]
        return out


def entries_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> set[str]:
    """Pools whose entry differs between two pools documents."""
    return {pool for pool in set(before) | set(after) if before.get(pool) != after.get(pool)}


_LABELS: Final = frozenset(POLICY_LABELS.values())
