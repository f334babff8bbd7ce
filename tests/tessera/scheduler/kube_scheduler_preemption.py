"""kube-scheduler's DefaultPreemption (PostFilter), as the emulator runs it after a failed cycle.

Follows kubernetes/kubernetes, Kubernetes 1.30 and the newest release (1.36), where this logic
is the same in substance:

- `pkg/scheduler/framework/preemption/preemption.go` (`Evaluator.Preempt`): potential nodes are
  those whose status is Unschedulable (UnschedulableAndUnresolvable ones are never tried);
  `DryRunPreemption` keeps a node only with at least one victim ("expected at least one victim pod
  on node"), non-violating candidates first, and stops at max(10 % of the nodes, 100)
  (DefaultPreemptionArgs: minCandidateNodesPercentage 10, minCandidateNodesAbsolute 100);
  `callExtenders`: an extender with a preemptVerb that is interested in the pod gets every
  candidate (`ProcessPreemption`); an error fails the preemption unless the extender is
  ignorable; a node answered without victims likewise ("expected at least one victim pod on
  node %q"); the answer replaces the candidates. `pickOneNodeForPreemption`: fewest PDB
  violations, lowest highest-priority victim (`Pods[0]`), lowest sum of priorities (each +
  MaxInt32 + 1), fewest victims, latest earliest start time, then the first.
  `prepareCandidate`: delete every victim, clear the nomination of lower-priority pods nominated
  to that node; the preemptor is nominated to it.
- `pkg/scheduler/extender.go` (`ProcessPreemption`, `convertToVictims`, `convertPodUIDToPod`):
  with nodeCacheCapable the body is `{"Pod", "NodeNameToVictims": null,
  "NodeNameToMetaVictims": {node: {"Pods": [{"UID"}], "NumPDBViolations"}}}`; the reply's
  `NodeNameToMetaVictims` is read whatever was sent; an unknown node or a UID that is not a pod
  of that node in the snapshot is an error ("extender: <url> claims to preempt pod (UID: ...)
  on node: <node>, but the pod is not found on that node").
- `pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go`
  (`SelectVictimsOnNode`): remove every pod of lower priority (`PodPriority`: spec.priority, 0
  when unset), fail when the filter plugins (not the extenders) still reject the pod; sort by
  `MoreImportantPod` (priority, then earlier start time; no start time = now); reprieve the
  PDB-violating ones first, then the others, each kept only while the pod still fits;
  `filterPodsWithPDBViolation`: per pod, every budget of its namespace whose non-empty selector
  matches it loses one allowed disruption, and a budget below zero makes the pod violating.
  `PodEligibleToPreemptOthers`: preemptionPolicy Never does not preempt.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from tessera.kube.api import KubeObject

if TYPE_CHECKING:
    from kube_scheduler_emulator import KubeSchedulerEmulator, Status

_MAX_INT32: Final = 2**31 - 1
MIN_CANDIDATE_NODES_PERCENTAGE: Final = 10
MIN_CANDIDATE_NODES_ABSOLUTE: Final = 100


def pod_priority(pod: KubeObject) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return int(value) if isinstance(value, int) else 0


def start_time(pod: KubeObject) -> float:
    text = (pod.get("status") or {}).get("startTime")
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else math.inf


def importance(pod: KubeObject) -> tuple[int, float]:
    """Sort key, most important first (MoreImportantPod)."""
    return (-pod_priority(pod), start_time(pod))


@dataclass(frozen=True)
class Candidate:
    node: str
    victims: tuple[KubeObject, ...]
    pdb_violations: int


@dataclass
class PreemptionResult:
    nominated: str | None = None
    victims: list[str] = field(default_factory=list)  # names of the pods deleted
    proposed: dict[str, list[str]] = field(default_factory=dict)  # kube-scheduler's own victims per node, by name
    candidates: dict[str, list[str]] = field(default_factory=dict)  # after the extender, by name
    error: str = ""
    message: str = ""


class DefaultPreemption:
    def __init__(self, scheduler: KubeSchedulerEmulator) -> None:
        self.scheduler = scheduler

    def post_filter(self, pod: KubeObject, statuses: Mapping[str, Status], all_nodes: int) -> PreemptionResult:
        result = PreemptionResult()
        if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
            result.message = "not eligible due to preemptionPolicy=Never."
            return result
        potential = [n for n in self.scheduler.api.list_nodes() if getattr(statuses.get(n["metadata"]["name"]), "code", "") == "Unschedulable"]
        candidates = self._dry_run(pod, potential)
        result.proposed = {c.node: [v["metadata"]["name"] for v in c.victims] for c in candidates}
        if not candidates:
            result.message = f"0/{all_nodes} nodes are available: Preemption is not helpful for scheduling."
            return result
        try:
            candidates = self._call_extenders(pod, candidates)
        except ValueError as exc:
            result.error = str(exc)
            return result
        result.candidates = {c.node: [v["metadata"]["name"] for v in c.victims] for c in candidates}
        best = pick_one_node(candidates)
        if best is None:
            result.message = "no candidate node for preemption"
            return result
        for victim in best.victims:
            self.scheduler.delete_pod(victim)
            result.victims.append(victim["metadata"]["name"])
        for uid, node in list(self.scheduler.nominated.items()):
            if node == best.node and uid != pod["metadata"]["uid"]:
                others = [p for p in self.scheduler.api.list_pods() if p["metadata"]["uid"] == uid]
                if others and pod_priority(others[0]) < pod_priority(pod):
                    del self.scheduler.nominated[uid]
        result.nominated = best.node
        return result

    # --- DryRunPreemption ---------------------------------------------------------------------------
    def _dry_run(self, pod: KubeObject, nodes: Sequence[KubeObject]) -> list[Candidate]:
        wanted = min(len(nodes), max(len(nodes) * MIN_CANDIDATE_NODES_PERCENTAGE // 100, MIN_CANDIDATE_NODES_ABSOLUTE))
        budgets = self.scheduler.api.disruption_budgets()
        clean: list[Candidate] = []
        violating: list[Candidate] = []
        for node in nodes:
            found = self._select_victims(pod, node, budgets)
            if found is None:
                continue
            (clean if found.pdb_violations == 0 else violating).append(found)
            if clean and len(clean) + len(violating) >= wanted:
                break
        return clean + violating

    def _select_victims(self, pod: KubeObject, node: KubeObject, budgets: list[tuple[str, dict[str, str], int]]) -> Candidate | None:
        name = node["metadata"]["name"]
        on_node = self.scheduler.pods_on(name)
        lower = [p for p in on_node if pod_priority(p) < pod_priority(pod)]
        if not lower:
            return None  # "No preemption victims found for incoming pod"
        remaining = [p for p in on_node if p not in lower]
        if self.scheduler.run_filters(pod, node, remaining) is not None:
            return None
        lower.sort(key=importance)
        violating, clean = split_by_budgets(lower, budgets)
        victims: list[KubeObject] = []
        count = 0
        for group, counts in ((violating, True), (clean, False)):
            for p in group:
                remaining.append(p)
                if self.scheduler.run_filters(pod, node, remaining) is not None:
                    remaining.remove(p)
                    victims.append(p)
                    count += counts
        if violating and clean:
            victims.sort(key=importance)
        if not victims:
            return None  # "expected at least one victim pod on node"
        return Candidate(name, tuple(victims), count)

    # --- callExtenders / ProcessPreemption ----------------------------------------------------------
    def _call_extenders(self, pod: KubeObject, candidates: list[Candidate]) -> list[Candidate]:
        ext = self.scheduler.extender
        if not ext.supports_preemption or not ext.is_interested(pod):
            return candidates
        if ext.node_cache_capable:
            meta = {c.node: {"Pods": [{"UID": v["metadata"]["uid"]} for v in c.victims], "NumPDBViolations": c.pdb_violations} for c in candidates}
            args: dict[str, Any] = {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
        else:
            full = {c.node: {"Pods": list(c.victims), "NumPDBViolations": c.pdb_violations} for c in candidates}
            args = {"Pod": pod, "NodeNameToVictims": full, "NodeNameToMetaVictims": None}
        try:
            reply = self.scheduler.send(ext.preempt_verb, args)
            answered = self._to_victims(reply.get("NodeNameToMetaVictims") or {})
        except Exception as exc:  # noqa: BLE001 - any failure of the call is the extender's error
            if ext.ignorable:
                return candidates
            raise ValueError(str(exc)) from exc
        for node, victims in list(answered.items()):
            if not victims.victims:
                if ext.ignorable:
                    del answered[node]
                    continue
                raise ValueError(f"expected at least one victim pod on node {node!r}")
        return list(answered.values())

    def _to_victims(self, meta: Mapping[str, Any]) -> dict[str, Candidate]:
        out: dict[str, Candidate] = {}
        nodes = {n["metadata"]["name"] for n in self.scheduler.api.list_nodes()}
        for node, entry in meta.items():
            if node not in nodes:
                raise ValueError(f'nodeinfo not found for node name "{node}"')
            pods = {p["metadata"]["uid"]: p for p in self.scheduler.pods_on(node)}
            victims = []
            for meta_pod in (entry or {}).get("Pods") or []:
                found = pods.get(meta_pod.get("UID"))
                if found is None:
                    raise ValueError(
                        f"extender: {self.scheduler.extender.url_prefix} claims to preempt pod (UID: {meta_pod.get('UID')}) "
                        f"on node: {node}, but the pod is not found on that node"
                    )
                victims.append(found)
            out[node] = Candidate(node, tuple(victims), int((entry or {}).get("NumPDBViolations") or 0))
        return out


def split_by_budgets(pods: Sequence[KubeObject], budgets: list[tuple[str, dict[str, str], int]]) -> tuple[list[KubeObject], list[KubeObject]]:
    """filterPodsWithPDBViolation, for budgets with matchLabels selectors."""
    allowed = [b[2] for b in budgets]
    violating: list[KubeObject] = []
    clean: list[KubeObject] = []
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        hit = False
        if labels:
            for i, (namespace, selector, _) in enumerate(budgets):
                if namespace != pod["metadata"].get("namespace") or not selector:
                    continue
                if all(labels.get(k) == v for k, v in selector.items()):
                    allowed[i] -= 1
                    hit = hit or allowed[i] < 0
        (violating if hit else clean).append(pod)
    return violating, clean


def pick_one_node(candidates: Sequence[Candidate]) -> Candidate | None:
    """pickOneNodeForPreemption with the default score functions."""
    if not candidates:
        return None

    def earliest_start(c: Candidate) -> float:
        top = pod_priority(c.victims[0])
        return min(start_time(v) for v in c.victims if pod_priority(v) == top)

    scores = [
        lambda c: -c.pdb_violations,
        lambda c: -pod_priority(c.victims[0]),
        lambda c: -sum(pod_priority(v) + _MAX_INT32 + 1 for v in c.victims),
        lambda c: -len(c.victims),
        earliest_start,
    ]
    remaining = list(candidates)
    for score in scores:
        best = max(score(c) for c in remaining)
        remaining = [c for c in remaining if score(c) == best]
        if len(remaining) == 1:
            break
    return remaining[0]
