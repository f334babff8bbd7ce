"""Which pods to evict on one node so that a pod fits there: the extender's answer to /preempt.

kube-scheduler picks victims by summing `tessera.dev/gpu-core` over the node, which says nothing
about single GPUs: evicting 30 % on each of two GPUs "frees" 60 % of the node and no GPU can take
a 50 % share. Here the question is asked of the production fit check (a `Trial`: the extender's
sets the victims aside in the allocation model, evaluates the pod with the node's placement
policy, and puts them back when the search ends), so a returned set always makes the pod fit on
this node, per GPU.

Which set, among those that fit (kube-scheduler's own order of preference for preemption
candidates, `pickOneNodeForPreemption` in pkg/scheduler/framework/preemption/preemption.go):

1. the fewest PodDisruptionBudget violations (an upper bound, see `pdb_bound`);
2. the lowest highest victim priority;
3. the fewest victims, then the lowest sum of victim priorities (kube-scheduler sums priority +
   MaxInt32 + 1 per victim: for non-negative priorities that is fewest first, then lowest sum);
4. victims that started last (kube-scheduler's `MoreImportantPod` keeps earlier-started pods).

Fitting is monotone in the set of victims (evicting more never hurts), so the best set is a
minimal one. The search: for every set of GPUs the pod could land on (as many as it needs), the
pods holding any of them form a group, cheapest groups first; a group that fits when all its pods
go is reduced the way kube-scheduler reduces its own set (`SelectVictimsOnNode`: give back the
most important pods first while the pod still fits), then small groups are searched exactly for a
better subset. A group whose best single pod cannot beat the set in hand is skipped, and the
search ends once that set is the node's best single pod. Only when no group alone helps is the
whole node reduced. Every set is checked with the trial; the checks are bounded (`SearchLimits`),
but for the reductions, which make at most 2n checks for n pods.

Linear in the candidates: the trial is told only the pods that changed since its last check
(the reprieve's checks differ by a pod or a few), and the sets asked are remembered without
being built (`victim_sets`), so a node where every candidate must stay a victim costs n checks
and O(n) work besides them, not O(n^2).

Pure: no state, no I/O; the caller supplies the trial and holds whatever lock makes it consistent.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tessera.scheduler.victim_sets import AskedSets, Reprieve, Step

Fits = Callable[[frozenset[str]], bool]


class Trial(Protocol):
    """A fit check over a running set of victims (`tessera.alloc.eviction.EvictionTrial` is
    the extender's): `evict` and `keep` change the set, `fits` says whether the pod fits with
    the set gone."""

    def evict(self, uids: Iterable[str]) -> None: ...

    def keep(self, uids: Iterable[str]) -> None: ...

    def fits(self) -> bool: ...


class SetTrial:
    """A `Trial` over a check of the whole set at once (each check is then O(the set))."""

    def __init__(self, fits: Fits) -> None:
        self._fits = fits
        self._victims: set[str] = set()

    def evict(self, uids: Iterable[str]) -> None:
        self._victims.update(uids)

    def keep(self, uids: Iterable[str]) -> None:
        self._victims.difference_update(uids)

    def fits(self) -> bool:
        return self._fits(frozenset(self._victims))


@dataclass(frozen=True)
class Candidate:
    """A pod the extender may name as a victim: lower priority than the preemptor, known to
    kube-scheduler on this node. `proposed`: kube-scheduler itself chose it as a victim."""

    uid: str
    priority: int
    started_at: float  # epoch seconds; inf when not started yet (kube-scheduler counts it as "now")
    gpus: frozenset[int]
    proposed: bool = False


@dataclass(frozen=True)
class SearchLimits:
    """How hard one node's search may try.

    max_checks: default 128 fit checks per node (each releases the set, evaluates the pod with the
        placement policy and reserves the set again), after the ones every node gets (the whole
        node, then its reduction), which keep the answer complete.
    exact_pods: default 8: GPU groups with at most this many candidates are searched exactly.
    max_groups: default 64 GPU groups (sets of GPUs the pod could land on) per node.
    """

    max_checks: int = 128
    exact_pods: int = 8
    max_groups: int = 64


@dataclass(frozen=True)
class Choice:
    uids: frozenset[str]
    pdb_violations: int


class _Search:
    def __init__(self, candidates: Sequence[Candidate], trial: Trial, proposed_violations: int, extra_proposed: int, limits: SearchLimits) -> None:
        self.by_uid = {c.uid: c for c in candidates}
        self.trial = trial
        self.violations = proposed_violations
        self.extra = extra_proposed
        self.limits = limits
        self.checks = 0
        self.asked = AskedSets()
        self.evicted: set[str] = set()  # the trial's victims now
        # while the trial follows a reprieve: it holds the reprieve's kept pods as victims but
        # for the pods in `unsure`, which are checked one by one at its next step
        self.following: Reprieve | None = None
        self.unsure: list[str] = []

    def fits(self, uids: frozenset[str], *, free: bool = False, pruned: bool = False) -> bool:
        """The trial's answer for this set, remembered. `pruned`: first look for a set that did
        not fit and holds these (then they do not fit either); worth it only where many small
        sets are tried."""
        found = self.asked.answer(uids)
        if found is not None:
            return found
        if pruned and self.asked.within_failed(uids):
            return False
        if not free:
            self.checks += 1
        self.trial.evict(uids - self.evicted)
        self.trial.keep(self.evicted - uids)
        self.evicted = set(uids)
        self.following = None
        ok = self.trial.fits()
        self.asked.record(uids, ok)
        return ok

    def fits_step(self, reprieve: Reprieve, step: Step, *, free: bool) -> bool:
        """`fits` of a reprieve's step, the trial moved by the pods that changed since its last
        check (all of them on the reprieve's first check)."""
        found = self.asked.answer(step)
        if found is not None:
            return found
        if not free:
            self.checks += 1
        if self.following is reprieve:
            touched: Iterable[str] = [*self.unsure, *reprieve.back(step)]
        else:
            touched = self.evicted | reprieve.kept
            self.following = reprieve
        evicted = self.evicted
        evict = [uid for uid in touched if uid in step and uid not in evicted]
        keep = [uid for uid in touched if uid in evicted and uid not in step]
        evicted.update(evict)
        evicted.difference_update(keep)
        self.trial.evict(evict)
        self.trial.keep(keep)
        self.unsure = list(reprieve.back(step))
        ok = self.trial.fits()
        self.asked.record(step, ok)
        return ok

    @property
    def spent(self) -> bool:
        return self.checks >= self.limits.max_checks

    def key(self, uids: Collection[str]) -> Key:
        return _key([self.by_uid[u] for u in uids], self.violations, self.extra)

    def floor(self, pool: Collection[str]) -> Key:
        """No non-empty subset of `pool` has a smaller key than its best single pod: every
        component of the key only grows with the set, and a set of two or more loses on count
        to any single member that does not lose on PDB bound or top priority."""
        return min(_key([self.by_uid[u]], self.violations, self.extra) for u in pool)

    def reduce(self, uids: frozenset[str], *, free: bool = False) -> frozenset[str]:
        """kube-scheduler's reprieve: give back the costliest pods first while the pod still fits
        (pods kube-scheduler did not propose first: their budgets are unknown).

        The pods are taken in that order, one at a time as kube-scheduler does, but asked about
        in runs that double while they can all be given back: if the pod fits with a whole run
        back, it fits with each of them back in turn (fitting is monotone in the victims), so the
        answer is the one-at-a-time answer. A node where most pods go back (the usual case: the
        victims are few) costs about log2(n) fit checks instead of n; one where every pod must
        stay costs n. Each check moves the trial by the pods that changed since the one before
        (`fits_step`), so either costs O(n) besides the checks themselves."""
        order = [c.uid for c in sorted((self.by_uid[u] for u in uids), key=lambda c: (c.proposed, -c.priority, c.started_at, c.uid))]
        reprieve = Reprieve(order)
        at, run = 0, 1
        while at < len(order):
            step = reprieve.step(at, run)
            if self.fits_step(reprieve, step, free=free):
                reprieve.give_back(step)
                if self.following is reprieve:
                    self.unsure.extend(reprieve.back(step))  # victims of the trial, no longer kept
                at += step.run
                run *= 2
            elif run == 1:
                at += 1  # this pod stays a victim
            else:
                run = 1  # one of the run must stay: ask pod by pod again from here
        return frozenset(reprieve.kept)

    def exact(self, pool: frozenset[str], best: frozenset[str]) -> frozenset[str]:
        """The best subset of `pool` that fits, if one beats `best` (within the check budget).
        Pods of higher priority than `best`'s top one cannot be part of a better set."""
        best_key = self.key(best)
        top = best_key[1]
        pods = sorted((self.by_uid[u] for u in pool if self.by_uid[u].priority <= top), key=lambda c: c.uid)
        better = [
            (key, combo)
            for n in range(1, len(pods) + 1)
            for combo in itertools.combinations(pods, n)
            if (key := _key(combo, self.violations, self.extra)) < best_key
        ]
        better.sort(key=lambda item: item[0])
        for _, combo in better:
            if self.spent:
                break
            subset = frozenset(c.uid for c in combo)
            if self.fits(subset, pruned=True):
                return subset  # sorted by key: the first that fits is the best
        return best


Key = tuple[int, float, int, int, float, tuple[str, ...]]


def _key(pods: Sequence[Candidate], violations: int, extra: int) -> Key:
    """kube-scheduler's order of preference (smaller is better), see the module docstring."""
    proposed = sum(1 for p in pods if p.proposed)
    return (
        pdb_bound(proposed + extra, len(pods) - proposed, violations),
        max((p.priority for p in pods), default=-math.inf),
        len(pods),
        sum(p.priority for p in pods),
        -min((p.started_at for p in pods), default=math.inf),
        tuple(sorted(p.uid for p in pods)),
    )


def pdb_bound(proposed: int, added: int, proposed_violations: int) -> int:
    """How many PodDisruptionBudgets a victim set may violate, from what kube-scheduler told us.

    kube-scheduler sends only a count for its own set (`NumPDBViolations`), never which pods
    or budgets. Of the proposed pods we keep, at most that many violate; a pod we add is one it
    spared, and its budget is unknown, so it counts as one. Never an underestimate of what
    kube-scheduler would have counted for the same set."""
    return min(proposed_violations, proposed) + added


def gpu_groups(gpus: Iterable[int], needed: int, limit: int, *, smallest: int = 1) -> list[frozenset[int]]:
    """Sets of `smallest` to `needed` GPUs (smallest first), at most `limit` of them."""
    indices = sorted(set(gpus))
    out: list[frozenset[int]] = []
    for size in range(max(1, smallest), min(needed, len(indices)) + 1):
        for combo in itertools.combinations(indices, size):
            if len(out) >= limit:
                return out
            out.append(frozenset(combo))
    return out


def choose_victims(
    candidates: Sequence[Candidate],
    trial: Trial,
    *,
    gpus: Iterable[int],
    gpus_needed: int,
    smallest_group: int = 1,
    proposed_violations: int = 0,
    extra_proposed: int = 0,
    limits: SearchLimits = SearchLimits(),
) -> Choice | None:
    """The best victim set among `candidates`, or None when evicting all of them does not make
    the pod fit (no victim set helps). An empty set means the pod fits already. `trial` is left
    with any set of victims: its owner puts them back.

    `gpus`: the node's GPU indices; `gpus_needed`: GPUs the pod's containers take in all;
    `smallest_group`: the most GPUs one container takes (no fewer GPUs can hold the pod).
    `proposed_violations`: kube-scheduler's NumPDBViolations for its set; `extra_proposed`: pods
    of that set that are not candidates here but stay victims (pods holding no GPU)."""
    search = _Search(candidates, trial, proposed_violations, extra_proposed, limits)
    everyone = frozenset(search.by_uid)
    if not search.fits(everyone, free=True):
        return None
    if search.fits(frozenset(), free=True):
        return Choice(frozenset(), search.key(())[0])
    floor = search.floor(everyone)
    pools: list[frozenset[str]] = []
    for group in gpu_groups(gpus, gpus_needed, limits.max_groups, smallest=smallest_group):
        pool = frozenset(c.uid for c in candidates if c.gpus & group)
        if pool and pool not in pools:
            pools.append(pool)
    # the cheapest-looking groups first, so that good sets are found early and prune the rest
    pools.sort(key=lambda pool: (search.key(pool), search.floor(pool)))
    best: frozenset[str] | None = None
    for pool in pools:
        if search.spent or (best is not None and search.key(best) <= floor):
            break  # out of checks, or the best single pod of the node already fits
        if best is not None and search.floor(pool) >= search.key(best):
            continue
        if not search.fits(pool):
            continue
        reduced = search.reduce(pool)
        if best is None or search.key(reduced) < search.key(best):
            best = reduced
        if len(pool) <= limits.exact_pods:
            best = search.exact(pool, best)
    if best is None:  # no GPU group alone helps (e.g. CPU or memory is short too): the whole node
        best = search.reduce(everyone, free=True)
    return Choice(best, search.key(best)[0])
