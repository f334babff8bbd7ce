"""Node scores for pods on dra pools (`POST <prefix>/dra/prioritize`), from ResourceSlices and ResourceClaims.

On a dra pool kube-scheduler's DRA allocator decides fit and picks the devices (first fit over the
slice, which the plugin lists in the pool's placement order); what it lacks is a node choice that
looks at how full the GPUs are. This module gives it one: the same `tessera.alloc.Cluster`
scoring as the device-plugin route (the extender's policy, default fragmentation-aware), over the
view `dra_view.DraView` keeps of Tessera's slices and the claims allocated on them
(`dra_objects` reads them). A pod without a Tessera claim request, and a node not in the view,
score 0.

The view is watched, not polled: kube-scheduler writes a claim's allocation before it binds the
pod, so the next pod is scored against it within milliseconds, and a burst is spread by the
policy instead of being steered at one node. The watches start with the first /dra/prioritize (a
stack without dra pools never lists or watches anything); that request waits up to
`sync_wait_s` for the first lists, and scores 0 everywhere if they have not come (the entry is
ignorable: kube-scheduler's own scoring then decides, as it does when the extender is down).
Memory: the view holds the GPUs of every Tessera slice and the claims that hold Tessera devices,
not whole objects of other drivers.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from tessera.alloc import ContainerRequest, Evaluation, InvalidRequest, PlacementPolicy, PodRequest, PodUid, extender_scores
from tessera.kube.api import KubeApi, KubeApiError, KubeObject
from tessera.kube.informer import Informer, run_informer
from tessera.model.contract import DRA_DRIVER
from tessera.scheduler.dra_objects import claim_request, mapping_of, pod_claim_names
from tessera.scheduler.dra_view import DraView
from tessera.scheduler.extender_types import ExtenderArgs, HostPriority, host_priorities

log = logging.getLogger(__name__)

MAX_SCORE: Final = 10  # kube-scheduler's MaxExtenderPriority


@dataclass(frozen=True)
class DraScoreSettings:
    """watch_timeout_s: default 300 s, how often the watches are re-opened (as the pod cache's).
    retry_backoff_s: default 2 s between failed list/watch attempts.
    sync_wait_s: default 1 s, how long the first /dra/prioritize waits for the first lists (well
        inside kube-scheduler's extender `httpTimeout`)."""

    watch_timeout_s: float = 300.0
    retry_backoff_s: float = 2.0
    sync_wait_s: float = 1.0


class DraScorer:
    """Ranks the candidate nodes of a dra pod as the extender's policy would (0..10)."""

    def __init__(
        self,
        api: KubeApi,
        policy: PlacementPolicy,
        settings: DraScoreSettings = DraScoreSettings(),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._settings = settings
        self._clock = clock
        self.view = DraView(policy)
        self._start_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        """Scores advise and never block (the entry is ignorable), so a failure of our own is
        logged and answered with 0 everywhere rather than a 5xx."""
        names = args.candidate_names()
        try:
            return self._prioritize(args, names)
        except Exception:  # advice only: a bug here must not fail the scheduling cycle
            log.exception("dra scores: cannot score pod %s; every node scores 0", mapping_of(args.pod.get("metadata")).get("name"))
            return host_priorities(names, {})

    def _prioritize(self, args: ExtenderArgs, names: list[str]) -> list[HostPriority]:
        request = self._pod_request(args.pod)
        if request is None or not request.gpu_containers:
            return host_priorities(names, {})
        if not self._ensure_watching():
            log.warning("dra scores: ResourceSlices and ResourceClaims not listed yet; every node scores 0")
            return host_priorities(names, {})
        with self.view.lock:
            cluster = self.view.cluster
            known = [n for n in names if n in cluster.nodes]
            evaluations = cluster.evaluate_many(request, known)
        return host_priorities(names, ranked(evaluations))

    def _pod_request(self, pod: KubeObject) -> PodRequest | None:
        meta = mapping_of(pod.get("metadata"))
        namespace = meta.get("namespace") or "default"
        containers: list[ContainerRequest] = []
        try:
            for name in pod_claim_names(pod):
                containers.extend(claim_request(self._api.get_resource_claim(str(namespace), name)))
        except KubeApiError as exc:
            log.info("dra scores: cannot read a claim of pod %s/%s: %s", namespace, meta.get("name"), exc)
            return None
        except (InvalidRequest, TypeError, ValueError, AttributeError) as exc:
            log.info("dra scores: pod %s/%s: claim not scored: %s", namespace, meta.get("name"), exc)
            return None
        if not containers:
            return None
        return PodRequest(PodUid(str(meta.get("uid") or "")), tuple(containers), namespace=str(namespace), name=str(meta.get("name") or ""))

    # --- the watches ------------------------------------------------------------------------------
    def _ensure_watching(self) -> bool:
        """Start the two informers once; True when both have listed (waiting up to `sync_wait_s`)."""
        with self._start_lock:
            if not self._threads and not self._stop.is_set():
                self._start()
        deadline = self._clock() + self._settings.sync_wait_s
        for synced in (self.view.slices_synced, self.view.claims_synced):
            if not synced.wait(max(0.0, deadline - self._clock())):
                return False
        return True

    def _start(self) -> None:
        informers = (
            (Informer(
                "resourceslices", functools.partial(self._api.list_resource_slices_and_version, driver=DRA_DRIVER),
                functools.partial(self._api.watch_resource_slices, driver=DRA_DRIVER), self.view.replace_slices, self.view.slice_event,
            ), self.view.slices_synced),
            (Informer(
                "resourceclaims", self._api.list_resource_claims_and_version, self._api.watch_resource_claims,
                self.view.replace_claims, self.view.claim_event,
            ), self.view.claims_synced),
        )
        for informer, synced in informers:
            thread = threading.Thread(
                target=run_informer, args=(informer, synced, self._stop), name=f"dra-{informer.what}", daemon=True,
                kwargs={"now": self._clock, "watch_timeout_s": self._settings.watch_timeout_s, "retry_backoff_s": self._settings.retry_backoff_s},
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """The watches end when their stream next returns (the fake's `close()` ends them at once)."""
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        for thread in self._threads:
            thread.join(timeout_s)


def ranked(evaluations: Mapping[str, object]) -> dict[str, int]:
    """0..10 by `extender_scores`, with 10 only for the policy's best key (its tie-breaks
    included), so the node `Cluster.schedule` would pick is the one kube-scheduler sees on top."""
    valid = {n: e for n, e in evaluations.items() if isinstance(e, Evaluation)}
    scores = extender_scores({n: (e.score if isinstance(e, Evaluation) else None) for n, e in evaluations.items()})
    if valid:
        best = max(e.key for e in valid.values())
        for name, e in valid.items():
            if e.key != best and scores[name] == MAX_SCORE:
                scores[name] = MAX_SCORE - 1
    return scores
