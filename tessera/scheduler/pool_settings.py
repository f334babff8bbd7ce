"""Which pool settings the extender applies to a node: its labels or the pools file, latest edit wins.

Both sources are rendered from the same stack config, so they disagree only while an edit rolls
out (on `provider: existing` the labels change when `pulumi up` re-applies the node patches) or
when scheduled re-partitioning relabels nodes (`tessera.dev/max-shares-per-gpu`) without touching
the pools file. So per node and setting, the value edited last wins; values present when the
extender starts (or when a node first appears) count as equally old, and then the pools file
wins. The result is written into the node's labels in the allocation model, where
`NodeState.gpu_placement` / `max_shares_per_gpu` and the binder read it.

Mutable bookkeeping owned by one `SchedulerState` (under its lock); no I/O here.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tessera.model.contract import LABEL_GPU_PLACEMENT, LABEL_MAX_SHARES_PER_GPU, LABEL_POOL, LABEL_SHARING_POLICY

# pools-file key (tessera/manifests/settings.SharedPool.to_json) -> the node label it stands for
POOL_SETTING_LABELS: Final[Mapping[str, str]] = {
    "placement": LABEL_GPU_PLACEMENT,
    "policy": LABEL_SHARING_POLICY,
    "sharesPerGpu": LABEL_MAX_SHARES_PER_GPU,
}

_Seen = tuple[str | None, int]  # (value, generation at which this value was first seen; 0 = initial)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


class PoolSettings:
    def __init__(self) -> None:
        self._generation = 0
        self._file_loaded = False
        self._file: dict[tuple[str, str], _Seen] = {}  # (pool, label) -> value from the pools file
        self._labels: dict[tuple[str, str], _Seen] = {}  # (node, label) -> value from the node
        self._nodes: set[str] = set()

    def load_file(self, document: Mapping[str, Any]) -> set[str]:
        """Take a (re-)read pools document; returns the pools whose settings changed."""
        initial = not self._file_loaded
        self._file_loaded = True
        self._generation += 1
        wanted: dict[tuple[str, str], str | None] = {}
        for pool, entry in document.items():
            if isinstance(entry, Mapping):
                for key, label in POOL_SETTING_LABELS.items():
                    wanted[(str(pool), label)] = _text(entry.get(key))
        changed: set[str] = set()
        for where in set(self._file) - set(wanted):
            del self._file[where]
            changed.add(where[0])
        for where, value in wanted.items():
            seen = self._file.get(where)
            if seen is None or seen[0] != value:
                self._file[where] = (value, 0 if initial else self._generation)
                changed.add(where[0])
        return changed

    def effective_labels(self, node: str, labels: Mapping[str, str]) -> dict[str, str]:
        """`labels` with each pool setting taken from whichever source was edited last."""
        initial = node not in self._nodes
        self._nodes.add(node)
        self._generation += 1
        out = dict(labels)
        pool = labels.get(LABEL_POOL, "")
        for label in POOL_SETTING_LABELS.values():
            value = labels.get(label)
            seen = self._labels.get((node, label))
            if seen is None or seen[0] != value:
                seen = (value, 0 if initial else self._generation)
                self._labels[(node, label)] = seen
            from_file = self._file.get((pool, label))
            if from_file is not None and from_file[0] is not None and (value is None or from_file[1] >= seen[1]):
                out[label] = from_file[0]
        return out

    def forget_node(self, node: str) -> None:
        self._nodes.discard(node)
        for label in POOL_SETTING_LABELS.values():
            self._labels.pop((node, label), None)
