"""Fit checks over a running set of victims on one node (`EvictionTrial`), for /preempt.

kube-scheduler's reprieve gives a node's victims back one by one, asking each time whether the
preemptor still fits: n questions about sets of n pods that differ from the one before by a pod
or a few. Releasing and restoring every victim for each question would be O(n^2) pod moves; a trial
moves only the pods that changed (`Cluster.set_aside`), so n questions cost O(n).
"""
from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Protocol

from tessera.alloc.model import FitFailure, Placement, PodRequest, PodUid
from tessera.alloc.policy import Evaluation

SetAside = tuple[PodUid, PodRequest, Placement]  # a pod taken off its node by `Cluster.set_aside`


class Trialled(Protocol):
    """What a trial calls on the cluster (`Cluster`; a protocol, so that this module stays below
    it in the import layers)."""

    def set_aside(self, node_name: str, evict: Iterable[PodUid], put_back: Iterable[SetAside] = ()) -> list[SetAside]: ...

    def evaluate(self, pod: PodRequest, node_name: str) -> Evaluation | FitFailure: ...


class EvictionTrial:
    """Victims set aside on one node for a run of fit checks (`Cluster.eviction_trial`): the
    preemption search asks about sets of victims that differ from the one before by a pod or a
    few (kube-scheduler's reprieve gives the pods back one by one), so each check moves only
    those pods (`Cluster.set_aside`) instead of releasing and restoring every victim: n checks
    cost O(n) pod moves, not O(n^2). `evict` and `keep` are applied at the next `evaluate`;
    `close` (or leaving the `with` block, an exception included) puts every pod back, and the
    cluster is then as it was, but for its node versions.

    Used under the lock that serialises the cluster, from `eviction_trial` to `close`."""

    def __init__(self, cluster: Trialled, pod: PodRequest, node_name: str) -> None:
        self._cluster = cluster
        self._pod = pod
        self._node = node_name
        self._aside: dict[PodUid, SetAside] = {}  # off the node now
        self._evict: dict[PodUid, None] = {}  # to take off at the next evaluation
        self._keep: dict[PodUid, None] = {}  # to put back at the next evaluation

    def __enter__(self) -> EvictionTrial:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    def evict(self, uids: Iterable[str]) -> None:
        """These pods are victims from the next evaluation on (those not held on the node are
        ignored)."""
        for text in uids:
            uid = PodUid(text)
            if uid in self._keep:
                del self._keep[uid]
            elif uid not in self._aside:
                self._evict[uid] = None

    def keep(self, uids: Iterable[str]) -> None:
        """These pods are no longer victims from the next evaluation on."""
        for text in uids:
            uid = PodUid(text)
            if uid in self._evict:
                del self._evict[uid]
            elif uid in self._aside:
                self._keep[uid] = None

    def evaluate(self) -> Evaluation | FitFailure:
        """`Cluster.evaluate` of the pod on the node with the current victims gone."""
        if self._evict or self._keep:
            back = [self._aside.pop(uid) for uid in self._keep]
            for held in self._cluster.set_aside(self._node, self._evict, back):
                self._aside[held[0]] = held
            self._evict.clear()
            self._keep.clear()
        return self._cluster.evaluate(self._pod, self._node)

    def fits(self) -> bool:
        return isinstance(self.evaluate(), Evaluation)

    def close(self) -> None:
        """Put every pod set aside back; nothing is pending after."""
        self._evict.clear()
        self._keep.clear()
        if self._aside:
            back = list(self._aside.values())
            self._aside.clear()
            self._cluster.set_aside(self._node, (), back)
