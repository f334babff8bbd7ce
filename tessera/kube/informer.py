"""List, then watch from the list's version; what each of the extender's caches runs, one thread per kind.

A watch that ends is resumed from the last resourceVersion seen. A 410 Gone (history compacted)
or any other error leads to a fresh list, which also settles deletions that happened while no
watch was open: the list replaces the whole cache (`Informer.replace`).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tessera.kube.api import KubeApiError, KubeObject, WatchEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Informer:
    """One kind: how to list it (with the list's resourceVersion) and watch it, and what to do
    with a list (`replace(items, listed_at)`, `listed_at` from the `now` clock when the list
    began) and with each event."""

    what: str
    list_fn: Callable[[], tuple[list[KubeObject], str]]
    watch_fn: Callable[..., Iterator[WatchEvent]]
    replace: Callable[[list[KubeObject], float], None]
    handle: Callable[[WatchEvent], None]


def run_informer(
    informer: Informer,
    synced: threading.Event,
    stop: threading.Event,
    *,
    now: Callable[[], float],
    watch_timeout_s: float,
    retry_backoff_s: float,
) -> None:
    """Until `stop`: list, set `synced`, watch; re-watch from the last version, relist on errors."""
    version: str | None = None
    while not stop.is_set():
        try:
            if version is None:
                listed_at = now()
                items, version = informer.list_fn()
                informer.replace(items, listed_at)
                synced.set()
            received = 0
            for event in informer.watch_fn(resource_version=version, stop_after_s=watch_timeout_s):
                if stop.is_set():
                    return
                informer.handle(event)
                received += 1
                version = str(event.object.get("metadata", {}).get("resourceVersion") or version)
            if not received:
                stop.wait(0.05)  # a server that ends watches at once must not make us spin
        except KubeApiError as exc:
            if exc.status != 410:
                log.warning("list/watch %s failed: %s; retrying", informer.what, exc)
                stop.wait(retry_backoff_s)
            version = None  # relist
        except Exception:  # keep the cache alive through unexpected errors; relist
            log.exception("cache sync of %s failed; relisting", informer.what)
            version = None
            stop.wait(retry_backoff_s)
