"""The pools file as the device plugin reads it: parsed again only when it changed.

The node DaemonSet mounts the `tessera-pools` ConfigMap into both containers. The agent decides
from it whether a GPU runs an MPS daemon; the plugin must decide the same thing for the
containers it starts (MPS pipe mount, TESSERA_SHARING_POLICY), or a policy edit on an existing
cluster leaves the agent running MPS for containers that were never given the pipe directory.
Both therefore derive it with `tessera_node.agent.pools.pool_policy_for_node` (the plugin in
`DevicePlugin._apply_policy`, from `pools()`): the file wins over labels.

kubelet refreshes a mounted ConfigMap by swapping a symlink, so the target's stat (followed
through the link) changes on every edit; the plugin polls it with the node (every second) and
parses only then. It also stats it before every Allocate and PreStartContainer.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tessera_node.agent.pools import read_pools_file

_StatKey = tuple[int, int, int]  # (mtime ns, size, inode)
_RACY_S = 2.0  # modified this recently: do not trust the stat key alone
# One object for "no document", so callers can tell "unchanged" by identity (the plugin derives
# the pool policy again only when the labels or this document object changed).
_NONE: Mapping[str, Any] = MappingProxyType({})


class PoolsFile:
    """Cached view of one pools file; `None` path = no file (labels alone decide). Thread-safe:
    the supervisor and gRPC handlers both ask it."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: _StatKey | None = None
        self._pools: Mapping[str, Any] = _NONE
        self.reloads = 0  # parses done, for logs and tests

    def pools(self) -> Mapping[str, Any]:
        """The current document (empty when missing or unparsable); the same object until the file
        changes."""
        if self.path is None:
            return _NONE
        with self._lock:
            return self._current(self.path)

    def _current(self, path: Path) -> Mapping[str, Any]:
        try:
            st = path.stat()
        except OSError:
            self._seen, self._pools = None, _NONE
            return self._pools
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        # A rewrite within the filesystem's timestamp granularity of the previous one, with the
        # same size, keeps the stat key; so a file changed very recently is parsed regardless.
        recent = time.time() - st.st_mtime < _RACY_S
        if key != self._seen or recent:
            self._pools = read_pools_file(path)
            self._seen = key
            self.reloads += 1
        return self._pools
