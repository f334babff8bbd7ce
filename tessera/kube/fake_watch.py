"""The watch history of `FakeKubeApi`: what happened to each watched kind, kept for resumption.

A watch from a resourceVersion replays the kept events after it; one older than the kept history
gets 410 Gone (`ResourceExpired`, "too old resource version: %d (%d)"), as upstream's watch cache
answers (kubernetes/kubernetes v1.30.0 and v1.34.0, staging/src/k8s.io/apiserver/pkg/storage/
cacher/watch_cache.go, `getAllEventsSinceLocked`; cacher.go `Watch` delivers that error as the
stream's one ERROR event). An open watch whose reader fell behind the kept history ends with 410
too instead of skipping what it lost (cache_watcher.go closes a watcher too slow to take its
events; the client's re-watch from its last version then gets the 410).

The history is trimmed in small steps: freeing `history` deep-copied objects at once stalls
`serve --simulate` for ~30 ms every 10,000 events.
"""
from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

from tessera.kube.api import KubeObject, WatchEvent, WatchEventType
from tessera.kube.fake_status import StatusFailure, expired


class Kind(Enum):
    POD = "Pod"
    NODE = "Node"
    RESOURCE_SLICE = "ResourceSlice"
    RESOURCE_CLAIM = "ResourceClaim"


@dataclass(frozen=True)
class Logged:
    revision: int
    event: WatchEvent


def too_old(resource_version: int, oldest: int) -> StatusFailure:
    return expired(f"too old resource version: {resource_version} ({oldest})")


class WatchLog:
    """Events per kind in revision order; guarded by the store's condition, which `record` notifies."""

    def __init__(self, cond: threading.Condition, history: int) -> None:
        self._cond = cond
        self._history = history
        self._logs: dict[Kind, list[Logged]] = {kind: [] for kind in Kind}
        self._trimmed_before: dict[Kind, int] = {kind: 0 for kind in Kind}

    def record(self, kind: Kind, revision: int, event_type: WatchEventType, obj: KubeObject) -> None:
        """Keep an event (`obj` is already the caller's private copy); the caller holds the lock."""
        log = self._logs[kind]
        log.append(Logged(revision, WatchEvent(event_type, obj)))
        if len(log) > self._history + max(1, self._history // 16):
            self._trimmed_before[kind] = log[-self._history - 1].revision
            del log[: len(log) - self._history]
        self._cond.notify_all()

    def parts(self) -> tuple[object, ...]:
        """The containers holding the history (memory accounting)."""
        return (self._logs,)

    def __len__(self) -> int:
        return sum(len(log) for log in self._logs.values())

    def stream(
        self,
        kind: Kind,
        snapshot: Callable[[], tuple[list[KubeObject], int]],
        resource_version: str | None,
        stop_after_s: float | None,
        closed: Callable[[], bool],
    ) -> Iterator[WatchEvent]:
        """Events after `resource_version`, or `snapshot()`'s objects as ADDED and then what
        follows its revision. Events are shared between watchers: consumers must not mutate them."""
        deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
        with self._cond:
            if resource_version is None:
                objects, seen = snapshot()
                initial = [WatchEvent("ADDED", o) for o in objects]
            else:
                seen = int(resource_version)
                if seen < self._trimmed_before[kind]:
                    raise too_old(seen, self._trimmed_before[kind])
                initial = []
        yield from initial
        log = self._logs[kind]
        while True:
            with self._cond:
                if seen < self._trimmed_before[kind]:
                    raise too_old(seen, self._trimmed_before[kind])
                start = bisect.bisect_right(log, seen, key=lambda e: e.revision)
                pending = log[start:]
                if not pending:
                    if closed():
                        return
                    timeout = None if deadline is None else deadline - time.monotonic()
                    if timeout is not None and timeout <= 0:
                        return
                    self._cond.wait(min(timeout, 1.0) if timeout is not None else 1.0)
                    continue
                seen = pending[-1].revision
            for logged in pending:
                yield logged.event
