"""The victim sets the preemption search has asked about, and their answers, found without
building the sets (`AskedSets`).

kube-scheduler's reprieve (`victims._Search.reduce`) asks about sets of up to n pods: the pods
still kept, less a run of them. Building each as a frozenset to look it up among the earlier
answers cost O(n) per question, so O(n^2) on a node where every pod must stay. Here a set is
known by its size and a fingerprint (the sum of its members' hashes): a step of the reprieve
(`Step`) carries both, kept up to date as pods are given back, in O(the run) per step. Sets
with the same size and fingerprint are compared member by member only then (a true repeat, or
a hash collision), and two steps of the same reprieve in O(1). So the answers, and which
questions count as fit checks, are those of a dict keyed by the sets themselves.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

_NEVER = math.inf  # `Reprieve.removed_at` of a pod still kept


class Reprieve:
    """One run of the reprieve over `order` (the pods, in the order they are given back): the
    pods still kept, and when each of the others was given back (`give_back`)."""

    __slots__ = ("order", "position", "removed_at", "kept", "gone", "fingerprint", "time")

    def __init__(self, order: Sequence[str]) -> None:
        self.order = order
        self.position = {uid: i for i, uid in enumerate(order)}
        self.removed_at: dict[str, int] = {}
        self.kept = set(order)
        self.gone = 0  # pods given back
        self.fingerprint = sum(map(hash, order))  # of `kept`
        self.time = 0  # steps made

    def step(self, at: int, run: int) -> Step:
        """The set of the pods kept less `order[at:at + run]`, as it is now (`at`: the first
        pod not yet decided)."""
        back = self.order[at : at + run]
        step = Step(self, self.time, at, len(back), self.gone, self.fingerprint - sum(map(hash, back)))
        self.time += 1
        return step

    def back(self, step: Step) -> Sequence[str]:
        """The pods `step` leaves out of the kept ones."""
        return self.order[step.at : step.at + step.run]

    def give_back(self, step: Step) -> None:
        """The pods `step` leaves out are no victims (it was the last step made)."""
        for uid in self.back(step):
            self.removed_at[uid] = step.time
        self.kept.difference_update(self.back(step))
        self.gone += step.run
        self.fingerprint = step.fingerprint


class Step:
    """A set asked about by a reprieve: the pods kept at `time`, less `run` pods from `at`."""

    __slots__ = ("reprieve", "time", "at", "run", "gone", "size", "fingerprint")

    def __init__(self, reprieve: Reprieve, time: int, at: int, run: int, gone: int, fingerprint: int) -> None:
        self.reprieve = reprieve
        self.time = time
        self.at = at
        self.run = run
        self.gone = gone  # pods given back before it
        self.size = len(reprieve.order) - gone - run
        self.fingerprint = fingerprint

    def __contains__(self, uid: object) -> bool:
        if not isinstance(uid, str):
            return False
        reprieve = self.reprieve
        i = reprieve.position.get(uid)
        if i is None or self.at <= i < self.at + self.run:
            return False
        return reprieve.removed_at.get(uid, _NEVER) > self.time

    def __iter__(self) -> Iterator[str]:
        return (uid for uid in self.reprieve.order if uid in self)

    def same_as(self, other: Step) -> bool:
        """Whether the two steps of one reprieve are the same set. The pods left out of a step
        are those given back before it and its run; the earlier step's run must end where the
        later one's does, and every pod between their starts must have been given back in between."""
        first, last = (self, other) if self.time <= other.time else (other, self)
        return first.at <= last.at and first.at + first.run == last.at + last.run and last.gone - first.gone == last.at - first.at


Asked = frozenset[str] | Step


def _same(a: Asked, b: Asked) -> bool:
    """Equal as sets, `a` and `b` being of one size."""
    if isinstance(a, frozenset):
        return a == b if isinstance(b, frozenset) else all(uid in b for uid in a)
    if isinstance(b, frozenset):
        return all(uid in a for uid in b)
    if a.reprieve is b.reprieve:
        return a.same_as(b)
    return all(uid in a for uid in b)


def _key(asked: Asked) -> tuple[int, int]:
    if isinstance(asked, frozenset):
        return len(asked), sum(map(hash, asked))
    return asked.size, asked.fingerprint


class AskedSets:
    """Answers of the fit check by victim set, and the sets that did not fit."""

    __slots__ = ("_answers", "_failed")

    def __init__(self) -> None:
        self._answers: dict[tuple[int, int], list[tuple[Asked, bool]]] = {}
        self._failed: list[Asked] = []

    def answer(self, asked: Asked) -> bool | None:
        """The answer for this set if it was asked before, else None."""
        for other, fits in self._answers.get(_key(asked), ()):
            if _same(asked, other):
                return fits
        return None

    def record(self, asked: Asked, fits: bool) -> None:
        self._answers.setdefault(_key(asked), []).append((asked, fits))
        if not fits:
            self._failed.append(asked)

    def within_failed(self, uids: frozenset[str]) -> bool:
        """Whether a set that did not fit holds all of `uids` (then they do not fit either)."""
        return any(uids <= failed if isinstance(failed, frozenset) else all(uid in failed for uid in uids) for failed in self._failed)
