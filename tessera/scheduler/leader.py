"""Lease-based leader election among extender replicas (coordination.k8s.io/v1).

The algorithm is client-go's (kubernetes/client-go `tools/leaderelection/leaderelection.go`,
`tryAcquireOrRenew`, `renew`, `release`, at v0.30.0 and unchanged through v0.34.0):

- A candidate reads the Lease every `retry_period_s`. It may take it when nobody holds it
  (`holderIdentity` empty: released), or when the record it last saw has not changed for
  `leaseDurationSeconds` as measured on its own monotonic clock from when it saw the change
  (`observedTime`), so clocks of different nodes never matter. It takes it with a PUT carrying the
  resourceVersion it read: of two candidates, only one PUT succeeds.
- The leader renews every `retry_period_s`; if no renewal succeeds for `renew_deadline_s` it stops
  acting as leader. `renew_deadline_s` < the lease, so it has stopped before anyone may take over.
- On a planned stop the leader releases: `holderIdentity` "", `leaseDurationSeconds` 1, so a
  standby takes over at its next look instead of after a whole lease.

Tessera's additions: the leader's URL rides on the Lease as an annotation (standbys forward
requests there), and `is_leader()` is also false once the last successful renewal is older than
the renew deadline, checked by the binder before each write (a leader paused past its deadline
writes nothing until it has renewed).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final, Literal

from tessera.kube.api import KubeApi, KubeApiError, KubeObject, NotFound
from tessera.model.contract import EXTENDER_LEASE
from tessera.model.leader_election import LeaderElectionTiming
from tessera.scheduler.metrics import ExtenderMetrics

log = logging.getLogger(__name__)

ANNOTATION_LEADER_URL: Final = "tessera.dev/leader-url"
Transition = Literal["acquired", "released", "lost"]


@dataclass(frozen=True)
class LeaderElectionSettings:
    """identity: unique per process (`<pod name>_<random>`, as kube-scheduler makes it).
    advertise_host: the address other replicas reach this one at (the pod IP); None: not reachable.
    """

    namespace: str
    identity: str
    advertise_host: str | None
    name: str = EXTENDER_LEASE
    timing: LeaderElectionTiming = LeaderElectionTiming()

    def url(self, port: int) -> str | None:
        if not self.advertise_host:
            return None
        host = f"[{self.advertise_host}]" if ":" in self.advertise_host else self.advertise_host
        return f"http://{host}:{port}"


@dataclass(frozen=True)
class Leader:
    identity: str
    url: str | None


def _micro_time(epoch_s: float) -> str:
    """metav1.MicroTime as the API server writes it (RFC 3339, microseconds)."""
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(lease: KubeObject) -> tuple[str, int, str, str, int, str | None]:
    """What a change of the Lease is judged by: holder, duration, times, transitions, URL."""
    spec = lease.get("spec") or {}
    url = ((lease.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_LEADER_URL)
    return (
        str(spec.get("holderIdentity") or ""), int(spec.get("leaseDurationSeconds") or 0), str(spec.get("acquireTime") or ""),
        str(spec.get("renewTime") or ""), int(spec.get("leaseTransitions") or 0), url,
    )


class LeaderElector:
    def __init__(
        self,
        api: KubeApi,
        settings: LeaderElectionSettings,
        metrics: ExtenderMetrics,
        *,
        url: str | None = None,
        on_started_leading: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`url`: where other replicas pass requests while this one leads (on the Lease).
        `on_started_leading()` runs in the election thread after the Lease is taken and before
        `is_leader()` turns true (the extender relists its pods there)."""
        self._api = api
        self.settings = settings
        self.url = url
        self._metrics = metrics
        self._on_started = on_started_leading
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._observed: tuple[str, int, str, str, int, str | None] | None = None
        self._observed_at = 0.0
        self._holding = False  # we hold the Lease (as far as our last write knows)
        self._leading = False  # is_leader(): holding, caught up, and renewed within the deadline
        self._resigning = False  # a planned stop: finish what runs, take nothing new
        self._campaigning = True  # false once released: only watch who leads next
        self._op = threading.Lock()  # one Lease operation at a time: a release never races a renewal
        self._renewed_at = -float("inf")
        self._mine: KubeObject | None = None  # the Lease as our last write left it (renewal's fast path)
        self._thread: threading.Thread | None = None
        metrics.leader.set(0)

    # --- what others ask --------------------------------------------------------------------------
    def is_leader(self) -> bool:
        with self._lock:
            return self._leading and self._monotonic() - self._renewed_at < self.settings.timing.renew_deadline_s

    def is_serving(self) -> bool:
        """Leads and takes new requests (not while handing over)."""
        return self.is_leader() and not self._resigning

    def resign(self) -> None:
        """Take no new requests from now on; `release()` then hands the Lease over."""
        with self._changed:
            self._resigning = True
            self._changed.notify_all()

    def leader(self) -> Leader | None:
        """The current leader as last seen, if its lease has not run out in our observation."""
        with self._lock:
            return self._leader_locked()

    def _leader_locked(self) -> Leader | None:
        if self._observed is None:
            return None
        holder, duration, *_, url = self._observed
        if not holder or self._monotonic() - self._observed_at > duration:
            return None
        if holder == self.settings.identity and (not self._leading or self._resigning):
            return None  # ours, but not caught up yet, or handing over
        return Leader(holder, url)

    def wait_for_leader(self, timeout_s: float) -> Leader | None:
        """The leader, waiting up to `timeout_s` for one to be known (a handover in progress)."""
        deadline = self._monotonic() + timeout_s
        with self._changed:
            while True:
                found = self._leader_locked()
                left = deadline - self._monotonic()
                if found is not None or left <= 0 or self._stop.is_set():
                    return found
                self._changed.wait(min(left, self.settings.timing.retry_period_s))

    # --- the loop ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Hand the Lease over (a planned stop) and from then on only follow who leads, so the
        requests still arriving can be passed to the successor."""
        with self._op:
            with self._lock:
                self._campaigning = False
            self._release()

    def stop(self) -> None:
        """End the loop. A Lease still held is left to run out (as after a crash)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.settings.timing.renew_deadline_s + 1)
        self._step_down("lost")

    def _run(self) -> None:
        timing = self.settings.timing
        while not self._stop.is_set():
            with self._op:
                wait = self._turn(timing)
            self._stop.wait(wait)

    def _turn(self, timing: LeaderElectionTiming) -> float:
        """One look at the Lease; returns how long to wait before the next."""
        with self._lock:
            campaigning = self._campaigning
        if not campaigning:
            self._follow()
            return timing.retry_period_s
        if self._try_acquire_or_renew():
            with self._lock:
                fresh = not self._leading
            if fresh:
                self._become_leader()
            return timing.retry_period_s
        if self._holding and self._monotonic() - self._renewed_at >= timing.renew_deadline_s:
            log.error("leader election: could not renew the lease within %.1f s; stepping down", timing.renew_deadline_s)
            self._step_down("lost")
        wait = timing.retry_period_s * (1.0 + 0.2 * random.random())  # noqa: S311 - jitter, not security
        # look again the moment the holder's lease runs out, not up to a retry period later
        return max(0.001, min(wait, self._expires_in() + 0.001))

    def _expires_in(self) -> float:
        """Seconds until the lease we last saw runs out (in our observation); inf without one."""
        with self._lock:
            if self._observed is None or not self._observed[0]:
                return float("inf")
            return self._observed_at + self._observed[1] - self._monotonic()

    def _become_leader(self) -> None:
        try:
            self._on_started()
        except Exception:  # the leader must not act on state it could not rebuild
            log.exception("leader election: preparing to lead failed; releasing the lease")
            self._release()
            return
        with self._changed:
            self._leading = True
            self._changed.notify_all()
        self._metrics.leader.set(1)
        self._metrics.leader_transitions.labels("acquired").inc()
        log.info("leader election: %s is the leader", self.settings.identity)

    def _step_down(self, how: Transition) -> None:
        with self._changed:
            was = self._leading
            self._leading = self._holding = False
            self._mine = None
            self._changed.notify_all()
        if was:
            self._metrics.leader.set(0)
            self._metrics.leader_transitions.labels(how).inc()
            log.warning("leader election: %s is no longer the leader (%s)", self.settings.identity, how)

    def _follow(self) -> None:
        s = self.settings
        try:
            self._observe(self._api.get_lease(s.namespace, s.name))
        except KubeApiError as exc:
            log.debug("leader election: cannot read lease %s/%s: %s", s.namespace, s.name, exc)

    def _observe(self, lease: KubeObject) -> None:
        record = _record(lease)
        with self._changed:
            if record != self._observed:
                self._observed = record
                self._observed_at = self._monotonic()
                self._changed.notify_all()

    def _try_acquire_or_renew(self) -> bool:
        s = self.settings
        with self._lock:
            mine = self._mine if self._holding else None
        if mine is not None:
            # client-go's fast path: renew from the Lease as we wrote it, one PUT, no read
            now = self._clock()
            body = self._lease_body(mine, now, _parse_time(_record(mine)[2], now), _record(mine)[4], int(s.timing.lease_duration_s))
            try:
                return self._won(self._api.replace_lease(s.namespace, s.name, body))
            except KubeApiError as exc:
                log.info("leader election: optimistic renewal of %s/%s failed, reading it: %s", s.namespace, s.name, exc)
        try:
            current: KubeObject | None = self._api.get_lease(s.namespace, s.name)
        except NotFound:
            current = None
        except KubeApiError as exc:
            log.info("leader election: cannot read lease %s/%s: %s", s.namespace, s.name, exc)
            return False
        now = self._clock()
        duration = int(s.timing.lease_duration_s)
        if current is None:
            body = self._lease_body(None, now, now, 0, duration)
            try:
                created = self._api.create_lease(s.namespace, body)
            except KubeApiError as exc:
                log.info("leader election: cannot create lease %s/%s: %s", s.namespace, s.name, exc)
                return False
            return self._won(created)
        self._observe(current)
        holder, _, acquired, _, transitions, _ = _record(current)
        ours = holder == s.identity
        if holder and not ours and self._leader_locked_snapshot() is not None:
            return False  # held by another, and not expired in our observation
        body = self._lease_body(current, now, _parse_time(acquired, now) if ours else now, transitions if ours else transitions + 1, duration)
        try:
            updated = self._api.replace_lease(s.namespace, s.name, body)
        except KubeApiError as exc:
            log.info("leader election: cannot %s lease %s/%s: %s", "renew" if ours else "take", s.namespace, s.name, exc)
            return False
        return self._won(updated)

    def _leader_locked_snapshot(self) -> Leader | None:
        with self._lock:
            if self._observed is None:
                return None
            holder, duration, *_ = self._observed
            if not holder or self._monotonic() - self._observed_at > duration:
                return None
            return Leader(holder, None)

    def _won(self, lease: KubeObject) -> bool:
        self._observe(lease)
        with self._lock:
            self._holding = True
            self._mine = lease
            self._renewed_at = self._monotonic()
        return True

    def _lease_body(self, current: KubeObject | None, now: float, acquired: float, transitions: int, duration: int) -> KubeObject:
        s = self.settings
        meta: KubeObject = dict((current or {}).get("metadata") or {"name": s.name, "namespace": s.namespace})
        annotations = dict(meta.get("annotations") or {})
        if self.url:
            annotations[ANNOTATION_LEADER_URL] = self.url
        else:
            annotations.pop(ANNOTATION_LEADER_URL, None)
        meta["annotations"] = annotations
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": s.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": _micro_time(acquired),
                "renewTime": _micro_time(now),
                "leaseTransitions": transitions,
            },
        }

    def _release(self) -> None:
        """client-go's `release()`: holder "", a 1 s lease, so a standby takes over at once."""
        with self._lock:
            holding = self._holding
        self._step_down("released")
        if not holding:
            return
        s = self.settings
        try:
            current = self._api.get_lease(s.namespace, s.name)
            if _record(current)[0] != s.identity:
                return
            now = self._clock()
            body = self._lease_body(current, now, now, _record(current)[4], 1)
            body["spec"]["holderIdentity"] = ""
            body["metadata"]["annotations"].pop(ANNOTATION_LEADER_URL, None)
            self._observe(self._api.replace_lease(s.namespace, s.name, body))
            log.info("leader election: released lease %s/%s", s.namespace, s.name)
        except KubeApiError as exc:
            log.warning("leader election: could not release lease %s/%s (a standby takes over when it expires): %s", s.namespace, s.name, exc)


def _parse_time(text: str, default: float) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default
