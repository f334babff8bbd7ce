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

A file that cannot be used at start is an error of the command (`cli.py`, exit 2). One that goes
bad later (removed, unreadable, not a JSON object) is logged once per bad version and the last
good document stays in force: a policy never changes because a file could not be read.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tessera_node.agent.pools import PoolsFileError, load_pools_file

log = logging.getLogger("tessera.deviceplugin")

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
        self._reported: tuple[_StatKey | None, str] | None = None  # the last problem logged
        self.reloads = 0  # parses done, for logs and tests
        self.problem: str | None = None  # why the file is not in force now, if it is not

    def pools(self) -> Mapping[str, Any]:
        """The current document (the last good one while the file is missing or bad; empty if it
        never was good); the same object until the file changes."""
        if self.path is None:
            return _NONE
        with self._lock:
            return self._current(self.path)

    def _current(self, path: Path) -> Mapping[str, Any]:
        try:
            st = path.stat()
        except OSError as exc:
            self._seen = None  # read it again whenever it is back
            self._bad(None, f"{path}: {exc.strerror or exc}")
            return self._pools
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        # A rewrite within the filesystem's timestamp granularity of the previous one, with the
        # same size, keeps the stat key; so a file changed very recently is parsed regardless.
        recent = time.time() - st.st_mtime < _RACY_S
        if key != self._seen or recent:
            self._seen = key
            self.reloads += 1
            try:
                document = load_pools_file(path)
            except PoolsFileError as exc:
                self._bad(key, str(exc))
                return self._pools
            if dict(document) != dict(self._pools) or self._pools is _NONE:
                self._pools = MappingProxyType(document)
            if self.problem is not None:
                log.info("pools file %s is readable again; its policy applies", path)
            self.problem, self._reported = None, None
        return self._pools

    def _bad(self, key: _StatKey | None, problem: str) -> None:
        self.problem = problem
        if self._reported != (key, problem):
            self._reported = (key, problem)
            kept = "the policy read before stays in force" if self._pools is not _NONE else "node labels decide the policy"
            log.warning("cannot use the pools file: %s; %s until it is fixed", problem, kept)
