"""Reading the pools file (`tessera.model.contract.POOLS_FILE`, the `tessera-pools` ConfigMap mounted as a
directory): pool name -> that pool's sharing settings (`tessera/manifests/pools.py` writes it).

Shared by the extender and the node agent. Pure parsing plus a change check on the file's stat:
kubelet replaces a mounted ConfigMap by swapping a symlink, which changes the inode; an editor or
a test may rewrite it in place within one mtime tick, so a file modified in the last
`RECENT_S` seconds is always read again.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

RECENT_S: Final = 2.0  # coarse filesystem mtimes: a file this fresh may have changed unseen

PoolsDocument = dict[str, Any]


def parse_pools_document(text: str) -> PoolsDocument:
    """The pools document, or {} when it is not a JSON object (node labels then apply)."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def read_pools_file(path: Path | None) -> PoolsDocument:
    """The pools document, or {} when there is none or it cannot be parsed (labels then apply)."""
    if path is None:
        return {}
    try:
        return parse_pools_document(path.read_text())
    except OSError:
        return {}


@dataclass
class PoolsFileWatch:
    """Re-reads `path` only when it may have changed (mtime, size, inode; always when fresh)."""

    path: Path
    clock: Callable[[], float] = time.time
    _stamp: tuple[int, int, int] | None = field(default=None, init=False)
    _read_once: bool = field(default=False, init=False)

    def poll(self) -> PoolsDocument | None:
        """The document when it may have changed since the last poll (first poll: always), else None."""
        try:
            st = os.stat(self.path)
        except OSError:
            stamp = None
            fresh = False
        else:
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            fresh = self.clock() - st.st_mtime_ns / 1e9 < RECENT_S
        if self._read_once and stamp == self._stamp and not fresh:
            return None
        self._read_once = True
        self._stamp = stamp
        return read_pools_file(self.path) if stamp is not None else {}
