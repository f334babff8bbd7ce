"""The victim search as its specification states it, one whole set per fit check: the reference
the production search (`tessera.scheduler.victims`, which moves a trial by the pods that changed
and remembers sets by fingerprint) must match check for check.

The steps, from the module docstring of `victims`: GPU groups smallest first, each group's pods
a pool, pools cheapest first; a pool that fits is reduced as kube-scheduler reduces its set (the
costliest pods given back first, asked about in runs that double while they can all go back)
and small pools are searched exactly; a set already asked is answered from memory, a set inside
one that did not fit is not asked where many small sets are tried, and every other question
counts against `max_checks` except the first two and the reduction of the whole node.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterable, Sequence

from tessera.scheduler.victims import Candidate, Choice, SearchLimits, gpu_groups, pdb_bound

Key = tuple[int, float, int, int, float, tuple[str, ...]]


class ReferenceSearch:
    def __init__(self, candidates: Sequence[Candidate], fits: Callable[[frozenset[str]], bool], violations: int, extra: int, limits: SearchLimits) -> None:
        self.by_uid = {c.uid: c for c in candidates}
        self.fits_raw = fits
        self.violations, self.extra, self.limits = violations, extra, limits
        self.checks = 0
        self.known: dict[frozenset[str], bool] = {}
        self.failed: list[frozenset[str]] = []

    def key(self, uids: Collection[str]) -> Key:
        pods = [self.by_uid[u] for u in uids]
        proposed = sum(1 for p in pods if p.proposed)
        return (
            pdb_bound(proposed + self.extra, len(pods) - proposed, self.violations),
            max((p.priority for p in pods), default=-math.inf),
            len(pods),
            sum(p.priority for p in pods),
            -min((p.started_at for p in pods), default=math.inf),
            tuple(sorted(uids)),
        )

    def floor(self, pool: Iterable[str]) -> Key:
        return min(self.key([u]) for u in pool)

    def fits(self, uids: frozenset[str], *, free: bool = False, pruned: bool = False) -> bool:
        if uids in self.known:
            return self.known[uids]
        if pruned and any(uids <= f for f in self.failed):
            return False
        if not free:
            self.checks += 1
        ok = self.known[uids] = self.fits_raw(uids)
        if not ok:
            self.failed.append(uids)
        return ok

    def reduce(self, uids: frozenset[str], *, free: bool = False) -> frozenset[str]:
        order = [c.uid for c in sorted((self.by_uid[u] for u in uids), key=lambda c: (c.proposed, -c.priority, c.started_at, c.uid))]
        kept = set(uids)
        at, run = 0, 1
        while at < len(order):
            back = order[at : at + run]
            if self.fits(frozenset(kept.difference(back)), free=free):
                kept.difference_update(back)
                at, run = at + len(back), run * 2
            elif run == 1:
                at += 1
            else:
                run = 1
        return frozenset(kept)

    def exact(self, pool: frozenset[str], best: frozenset[str]) -> frozenset[str]:
        best_key = self.key(best)
        pods = sorted((self.by_uid[u] for u in pool if self.by_uid[u].priority <= best_key[1]), key=lambda c: c.uid)
        better = sorted(
            (key, combo)
            for n in range(1, len(pods) + 1)
            for combo in itertools.combinations([p.uid for p in pods], n)
            if (key := self.key(combo)) < best_key
        )
        for _, combo in better:
            if self.checks >= self.limits.max_checks:
                break
            if self.fits(frozenset(combo), pruned=True):
                return frozenset(combo)
        return best


def reference_choice(
    candidates: Sequence[Candidate],
    fits: Callable[[frozenset[str]], bool],
    *,
    gpus: Iterable[int],
    gpus_needed: int,
    smallest_group: int = 1,
    proposed_violations: int = 0,
    extra_proposed: int = 0,
    limits: SearchLimits = SearchLimits(),
) -> Choice | None:
    search = ReferenceSearch(candidates, fits, proposed_violations, extra_proposed, limits)
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
    pools.sort(key=lambda pool: (search.key(pool), search.floor(pool)))
    best: frozenset[str] | None = None
    for pool in pools:
        if search.checks >= limits.max_checks or (best is not None and search.key(best) <= floor):
            break
        if best is not None and search.floor(pool) >= search.key(best):
            continue
        if not search.fits(pool):
            continue
        reduced = search.reduce(pool)
        if best is None or search.key(reduced) < search.key(best):
            best = reduced
        if len(pool) <= limits.exact_pods:
            best = search.exact(pool, best)
    if best is None:
        best = search.reduce(everyone, free=True)
    return Choice(best, search.key(best)[0])
