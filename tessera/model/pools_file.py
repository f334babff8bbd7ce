"""The pools file (`tessera.model.contract.POOLS_FILE`, the `tessera-pools` ConfigMap mounted as a
directory): pool name -> that pool's entry (`pool_policy.PoolPolicy.pools_entry`).

The extender, the device plugin and the node agent read it through one `PoolsFile` each, under
one rule for bad input: a file that cannot be used when a command starts is an error of the
command (`load_pools_file`, naming the file); one that goes bad later (removed, unreadable, not
a JSON object) is logged once per bad version and the last good document stays in force, so a
policy never changes because a file could not be read. With no good document yet, node labels
decide (`pool_policy.read_pool_policy` with an empty document).

kubelet refreshes a mounted ConfigMap by swapping a symlink, so the target's stat (followed
through the link) changes on every edit; readers stat it on each use and parse only then. A
rewrite in place within the filesystem's timestamp granularity keeps the stat, so a file
modified in the last `RECENT_S` seconds is parsed regardless.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

RECENT_S: Final = 2.0

log = logging.getLogger("tessera.pools")

_StatKey = tuple[int, int, int]  # (mtime ns, size, inode)
# One object for "no document", so callers can tell "unchanged" by identity.
NO_DOCUMENT: Final[Mapping[str, Any]] = MappingProxyType({})


class PoolsFileError(ValueError):
    """The pools file cannot be used; the message starts with its path."""


def load_pools_file(path: Path) -> dict[str, Any]:
    """The pools document, strictly: a missing, unreadable or malformed file is an error naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PoolsFileError(f"{path}: no such file (the tessera-pools ConfigMap is mounted at /etc/tessera/pools; leave --pools-file out to use node labels)") from None
    except UnicodeDecodeError as exc:
        raise PoolsFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise PoolsFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PoolsFileError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise PoolsFileError(f"{path}: expected a JSON object of pool name -> pool settings, found {type(data).__name__}")
    return data


class PoolsFile:
    """Cached view of one pools file; `None` path = no file (labels alone decide). Thread-safe."""

    def __init__(self, path: Path | None, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: _StatKey | None = None
        self._document: Mapping[str, Any] = NO_DOCUMENT
        self._reported: tuple[_StatKey | None, str] | None = None
        self.reloads = 0
        """Parses done, for logs and tests."""
        self.problem: str | None = None
        """Why the file is not in force now, if it is not."""

    def document(self) -> Mapping[str, Any]:
        """The current document (the last good one while the file is missing or bad; empty if it
        never was good); the same object until its content changes."""
        if self.path is None:
            return NO_DOCUMENT
        with self._lock:
            return self._current(self.path)

    def _current(self, path: Path) -> Mapping[str, Any]:
        try:
            st = path.stat()
        except OSError as exc:
            self._seen = None  # read it again whenever it is back
            self._bad(None, f"{path}: {exc.strerror or exc}")
            return self._document
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        recent = self._clock() - st.st_mtime < RECENT_S
        if key != self._seen or recent:
            self._seen = key
            self.reloads += 1
            try:
                document = load_pools_file(path)
            except PoolsFileError as exc:
                self._bad(key, str(exc))
                return self._document
            if self._document is NO_DOCUMENT or document != dict(self._document):
                self._document = MappingProxyType(document)
            if self.problem is not None:
                log.info("pools file %s is readable again; its policy applies", path)
            self.problem, self._reported = None, None
        return self._document

    def _bad(self, key: _StatKey | None, problem: str) -> None:
        self.problem = problem
        if self._reported != (key, problem):
            self._reported = (key, problem)
            kept = "the policy read before stays in force" if self._document is not NO_DOCUMENT else "node labels decide the policy"
            log.warning("cannot use the pools file: %s; %s until it is fixed", problem, kept)
