"""Keeps the cache in step with the API server: list, then watch from the list's version.

One thread per kind (nodes first: pod records can only be restored onto known nodes), plus a
janitor that expires assumed reservations. A watch that ends is resumed from the last version
seen; a 410 Gone (history compacted) or any error leads to a fresh list, which also reconciles
deletions that happened while no watch was open.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tessera.kube.api import KubeApi, KubeObject, WatchEvent
from tessera.kube.informer import Informer, run_informer
from tessera.scheduler.binder import Binder
from tessera.scheduler.state import SchedulerState


@dataclass(frozen=True)
class SyncSettings:
    """Watch and janitor timing.

    watch_timeout_s: default 300 s: a watch is re-opened this often (API servers end watches
        after 5-10 min anyway); bounded so a silent connection cannot go unnoticed forever.
    retry_backoff_s: default 2 s between failed list/watch attempts (no hot loop on an outage).
    janitor_interval_s: default 15 s between TTL sweeps of assumed reservations.
    """

    watch_timeout_s: float = 300.0
    retry_backoff_s: float = 2.0
    janitor_interval_s: float = 15.0


class ClusterSync:
    def __init__(
        self,
        api: KubeApi,
        state: SchedulerState,
        binder: Binder,
        settings: SyncSettings | None = None,
        *,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        """`leading()`: whether this replica settles reservations and reports conflicts (the
        leader); a standby only follows the watch."""
        self._api = api
        self._state = state
        self._binder = binder
        self._settings = settings or SyncSettings()
        self._leading = leading
        self._stop = threading.Event()
        self.nodes_synced = threading.Event()
        self.pods_synced = threading.Event()
        self._threads: list[threading.Thread] = []

    def ready(self) -> bool:
        return self.nodes_synced.is_set() and self.pods_synced.is_set()

    def start(self) -> None:
        targets: list[tuple[str, Callable[[], None]]] = [
            ("sync-nodes", self._run_nodes),
            ("sync-pods", self._run_pods),
            ("ttl-janitor", self._run_janitor),
        ]
        for name, target in targets:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait_ready(self, timeout_s: float) -> bool:
        return self.nodes_synced.wait(timeout_s) and self.pods_synced.wait(timeout_s)

    def stop(self) -> None:
        """Stop the loops; a watch blocked in the API ends at its timeout (the fake's `close()`
        ends it at once)."""
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        for thread in self._threads:
            thread.join(timeout_s)

    def _run_nodes(self) -> None:
        self._informer(
            "nodes",
            self._api.list_nodes_and_version,
            self._api.watch_nodes,
            lambda nodes, _listed_at: self._state.replace_nodes(nodes),
            self._node_event,
            self.nodes_synced,
        )

    def _run_pods(self) -> None:
        while not self._stop.is_set() and not self.nodes_synced.wait(0.2):
            pass
        self._informer(
            "pods",
            self._api.list_pods_and_version,
            self._api.watch_pods,
            self._state.replace_pods,
            self._pod_event,
            self.pods_synced,
        )

    def _node_event(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            self._state.remove_node(str(event.object["metadata"]["name"]))
        else:
            self._state.apply_node(event.object)

    def _pod_event(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            self._state.delete_pod(event.object)
        else:
            self._state.apply_pod(event.object)

    def _informer(
        self,
        what: str,
        list_fn: Callable[[], tuple[list[KubeObject], str]],
        watch_fn: Callable[..., Iterator[WatchEvent]],
        replace: Callable[[list[KubeObject], float], None],
        handle: Callable[[WatchEvent], None],
        synced: threading.Event,
    ) -> None:
        run_informer(
            Informer(what, list_fn, watch_fn, replace, handle), synced, self._stop,
            now=self._state.monotonic, watch_timeout_s=self._settings.watch_timeout_s, retry_backoff_s=self._settings.retry_backoff_s,
        )

    def _run_janitor(self) -> None:
        while not self._stop.wait(self._settings.janitor_interval_s):
            self.sweep()

    def sweep(self) -> int:
        """One sweep of the leader: settle assumed reservations past the TTL and unconfirmed
        writes against the API server, and post an Event for each record newly in conflict.
        A standby only drops the conflict notices (it logged them). Returns how many
        reservations it looked at."""
        if not self._leading():
            self._state.take_conflict_notices()
            return 0
        items = self._state.to_settle()
        for item in items:
            self._binder.settle(item)
        self._binder.report_conflicts()
        return len(items)

    def relist_pods(self) -> None:
        """A fresh list of pods, applied as the truth (a new leader, before it binds)."""
        listed_at = self._state.monotonic()
        items, _ = self._api.list_pods_and_version()
        self._state.replace_pods(items, listed_at)
