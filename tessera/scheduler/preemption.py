"""/preempt: per candidate node kube-scheduler sends, the victims that really make room.

What kube-scheduler does around this call (kubernetes/kubernetes
pkg/scheduler/framework/preemption/preemption.go, `Preempt` / `callExtenders`, and
plugins/defaultpreemption/default_preemption.go, `SelectVictimsOnNode`):

- Only nodes its own filter plugins rejected as Unschedulable are tried (a node our /filter
  rejected while its own NodeResourcesFit passes yields no victims there and is never sent here).
- On each it removes every pod of lower priority, then gives back the most important ones while
  its own plugins still pass; the rest, with how many of them violate a PodDisruptionBudget,
  is the node's proposal (`NumPDBViolations`).
- Up to max(10 % of those nodes, 100) proposals go to the extender in one call (the extender's
  `httpTimeout` covers the whole call). The answer replaces them: a node left out is no longer a
  candidate, a victim set may change, and every UID must be a pod of that node in its snapshot.
  A node answered with no victims, or an error from a non-ignorable extender, fails the whole
  preemption. It then picks a node (fewest PDB violations, lowest top victim priority, ...),
  deletes those victims and nominates the node; the pod is scheduled again once they are gone.

Our answer for each node (`victims.choose_victims`): only pods of lower priority than the
preemptor; only pods kube-scheduler knows on that node (bound ones, or ones it proposed); the
best set by kube-scheduler's own preferences that makes the pod fit per GPU in the production
fit check. Pods of the proposal that hold no Tessera GPU stay victims: kube-scheduler needed them
for CPU, memory or other reasons we do not model. Nodes where no set helps are left out, and so
are nodes not reached within `time_budget_s`.

Time: the budget runs from the request's first byte (the HTTP adapter passes that deadline to the
decoding and to `Preemptor.preempt`), because kube-scheduler's `httpTimeout` runs from when it
sent the call, not from when the extender finished reading it (kubernetes/kubernetes v1.30.0,
pkg/scheduler/extender.go, `NewHTTPExtender`: one `http.Client` whose `Timeout` is `httpTimeout`,
which in Go covers the whole exchange, reading the reply included). A body not decoded within the
budget is answered with an empty `NodeNameToMetaVictims` (kube-scheduler fails this preemption
attempt and tries the pod again later); a node whose search is under way when the budget runs out
is left out with the nodes not reached. The work is linear in the call: each listed UID is looked
up once (sets and dicts, no list scans), the pods held on a node come from the state's per-node
index, and the search per node is bounded by `SearchLimits`.

PodDisruptionBudgets: the extender does not read them (its RBAC has no PDB access, and
kube-scheduler's count depends on every lower-priority pod of the node, most of which it does
not track). It knows only kube-scheduler's count for the proposed set, so the count it returns is
an upper bound (`victims.pdb_bound`): the proposal's count for the proposed pods it keeps, plus
one for each pod it adds. Sets with a lower bound are preferred, as kube-scheduler prefers them.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tessera.alloc import InvalidRequest, PodRequest, PodUid, pod_request_from_k8s
from tessera.alloc.eviction import EvictionTrial
from tessera.kube.api import KubeObject
from tessera.scheduler.extender_types import ExtenderPreemptionArgs, ExtenderPreemptionResult, Victims
from tessera.scheduler.state import SchedulerState, pod_priority
from tessera.scheduler.victims import Candidate, SearchLimits, choose_victims

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreemptSettings:
    """How long /preempt may think.

    time_budget_s: default 2 s for one call, all nodes together, counted from the request's first
        byte (reading and decoding the body are part of it); nodes not reached by then are left
        out (kube-scheduler picks among the others), and a body not decoded by then is answered
        with no node at all. Keep it well under the extender's `httpTimeout` (5 s by default in
        the rendered configuration): a call that times out fails the pod's preemption.
    limits: the per-node search bounds (`victims.SearchLimits`).
    """

    time_budget_s: float = 2.0
    limits: SearchLimits = field(default_factory=SearchLimits)


class _OutOfTime(Exception):
    """The budget ran out in the middle of a node's search: the node is left out."""


class _TimedTrial:
    """The node's `EvictionTrial` as the victim search asks it (`victims.Trial`), out of time
    before a check; leaving the trial's `with` block puts its victims back."""

    def __init__(self, trial: EvictionTrial, monotonic: Callable[[], float], deadline: float) -> None:
        self._trial = trial
        self._monotonic = monotonic
        self._deadline = deadline

    def evict(self, uids: Iterable[str]) -> None:
        self._trial.evict(uids)

    def keep(self, uids: Iterable[str]) -> None:
        self._trial.keep(uids)

    def fits(self) -> bool:
        if self._monotonic() > self._deadline:
            raise _OutOfTime
        return self._trial.fits()


class Preemptor:
    def __init__(self, state: SchedulerState, settings: PreemptSettings, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        """`monotonic`: the clock deadlines are read on (`time.monotonic`, as the HTTP server's)."""
        self._state = state
        self._settings = settings
        self._monotonic = monotonic

    def deadline(self, started_at: float) -> float:
        """When a call whose request began at `started_at` (a `monotonic` reading: its first
        byte) must be answered."""
        return started_at + self._settings.time_budget_s

    def preempt(self, args: ExtenderPreemptionArgs, deadline: float | None = None) -> ExtenderPreemptionResult:
        """`deadline`: see `deadline`; None: the whole budget from now (callers in-process).

        Linear in the call: per node, the proposal's UIDs are looked up once each and the pods
        the extender holds there come from its per-node index (`SchedulerState.held_on`)."""
        if deadline is None:
            deadline = self.deadline(self._monotonic())
        if args.budget_spent or self._monotonic() > deadline:
            # an empty map fails this preemption attempt; kube-scheduler retries the pod later
            log.warning("preempt: time budget (%g s) spent reading and decoding the request; no node examined", self._settings.time_budget_s)
            return ExtenderPreemptionResult({})
        try:
            request = pod_request_from_k8s(args.pod)
        except InvalidRequest as exc:
            log.info("preempt: %s", exc)  # /filter made every node unresolvable for this pod
            return ExtenderPreemptionResult({})
        if not request.gpu_containers:
            return ExtenderPreemptionResult(dict(args.victims))  # not a Tessera pod: nothing to say
        if (args.pod.get("spec") or {}).get("preemptionPolicy") == "Never":
            return ExtenderPreemptionResult({})  # kube-scheduler does not preempt for it either
        priority = pod_priority(args.pod)
        kept: dict[str, Victims] = {}
        for i, (node, proposal) in enumerate(args.victims.items()):
            try:
                if self._monotonic() > deadline:
                    raise _OutOfTime
                victims = self._node(request, priority, node, proposal, deadline)
            except _OutOfTime:
                log.warning("preempt %s/%s: time budget spent; %d of %d nodes not examined", request.namespace, request.name, len(args.victims) - i, len(args.victims))
                break
            if victims is not None:
                kept[node] = victims
        return ExtenderPreemptionResult(kept)

    def _node(self, request: PodRequest, priority: int, node: str, proposal: Victims, deadline: float) -> Victims | None:
        state = self._state
        with state.lock:
            inventory = state.cluster.nodes.get(node)
            if inventory is None:
                return None  # not a Tessera GPU node: no Tessera pod can go there
            held = {h.uid: h for h in state.held_on(node)}
            for uid in proposal.uids:
                elsewhere = state.held_node(PodUid(uid))
                if elsewhere is not None and elsewhere != node:
                    log.warning("preempt: kube-scheduler lists pod %s on %s, the extender has it on %s; node left out", uid, node, elsewhere)
                    return None
            proposed = set(proposal.uids)
            # pods of the proposal holding no Tessera GPU: kube-scheduler's own reasons (CPU, memory, ...)
            passthrough = [u for u in proposal.uids if u not in held]
            candidates = [
                Candidate(h.uid, h.priority, h.started_at, h.gpus, h.uid in proposed)
                for h in held.values()
                if h.uid != request.uid and h.priority < priority and (h.bound or h.uid in proposed)
            ]
            with state.cluster.eviction_trial(request, node) as trial:
                choice = choose_victims(
                    candidates,
                    _TimedTrial(trial, self._monotonic, deadline),
                    gpus=[g.index for g in inventory.gpus if g.healthy],
                    gpus_needed=sum(c.gpu_count for c in request.gpu_containers),
                    smallest_group=max(c.gpu_count for c in request.gpu_containers),
                    proposed_violations=proposal.num_pdb_violations,
                    extra_proposed=len(passthrough),
                    limits=self._settings.limits,
                )
        if choice is None:
            return None
        chosen = set(choice.uids)
        violations = choice.pdb_violations
        if not chosen:
            # the GPUs are not what is short: keep kube-scheduler's own (valid) victims
            chosen = {c.uid for c in candidates if c.proposed}
            violations = min(proposal.num_pdb_violations, len(chosen) + len(passthrough))
        if not chosen and not passthrough:
            return None  # kube-scheduler fails the whole preemption on a node without victims
        known = {c.uid: c.priority for c in candidates}
        started = {c.uid: c.started_at for c in candidates}
        known.update({uid: pod_priority(p) for uid, p in _pods_by_uid(proposal).items()})
        return Victims(tuple(_importance_order([*passthrough, *chosen], proposal.uids, known, started)), violations)


def _pods_by_uid(victims: Victims) -> Mapping[str, KubeObject]:
    return {str(p["metadata"].get("uid")): p for p in victims.pods}


def _importance_order(uids: list[str], proposal: tuple[str, ...], known: Mapping[str, int], started: Mapping[str, float]) -> list[str]:
    """Most important first, as kube-scheduler lists victims (it reads the first as the highest
    priority on the node). A proposed pod whose priority we do not know is ranked by where
    kube-scheduler listed it: no higher than the known pod before it."""
    estimate: dict[str, float] = {}
    ceiling = math.inf
    for uid in proposal:
        if uid in known:
            ceiling = known[uid]
        else:
            estimate[uid] = ceiling
    position = {uid: i for i, uid in enumerate(proposal)}
    return sorted(
        uids,
        key=lambda u: (-known.get(u, estimate.get(u, math.inf)), started.get(u, math.inf), position.get(u, len(position)), u),
    )
