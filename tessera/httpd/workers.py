"""The threads that answer complete requests.

Sizing: the pool grows on demand to `max_connections` threads, and a complete request never
waits for a thread while fewer requests than that are being answered. That matters for the
extender, whose /bind may wait up to 10 s on the Kubernetes API: with a fixed pool of N threads,
N slow binds would hold up every /filter behind them. Beyond `max_connections` requests at once
(a burst larger than the cap), the rest wait for a thread in arrival order. Threads stop after
`linger_s` without work, so the usual count is the handful of connections a kube-scheduler, an
API server or a Prometheus keeps busy, and a burst's threads go away after it.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

Job = Callable[[], None]
LINGER_S: Final = 30.0


class WorkerPool:
    """Runs each submitted job on a thread of its own or an idle one; never queues a job behind
    busy workers while the pool is below `max_workers`."""

    def __init__(self, max_workers: int, name: str, *, linger_s: float = LINGER_S) -> None:
        self._max_workers = max_workers
        self._name = name
        self._linger_s = linger_s
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._queued = 0  # submitted and not yet taken by a worker

    def submit(self, job: Job) -> None:
        with self._lock:
            self._queued += 1
            start = self._queued > self._idle and self._threads < self._max_workers
            if start:
                self._threads += 1
        self._jobs.put(job)
        if start:
            try:
                threading.Thread(target=self._work, name=f"{self._name}-worker", daemon=True).start()
            except RuntimeError:  # no thread to be had (a resource limit): the running ones take it
                with self._lock:
                    self._threads -= 1

    def threads(self) -> int:
        with self._lock:
            return self._threads

    def stop(self) -> None:
        """Idle workers end now, busy ones after their job."""
        with self._lock:
            count = self._threads
        for _ in range(count):
            self._jobs.put(None)

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=self._linger_s)
            except queue.Empty:
                with self._lock:
                    if self._queued > 0:  # a job was submitted as we timed out: take it
                        self._idle -= 1
                        continue
                    self._idle -= 1
                    self._threads -= 1
                    return
            with self._lock:
                self._idle -= 1
                if job is not None:
                    self._queued -= 1
            if job is None:
                with self._lock:
                    self._threads -= 1
                return
            try:
                job()
            except Exception:  # a job answers its own errors; this keeps the worker alive regardless
                log.exception("%s: a worker's job failed", self._name)
