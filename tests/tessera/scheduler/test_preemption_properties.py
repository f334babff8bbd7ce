"""Properties of /preempt's victim choice, checked against the production fit code.

Random nodes and pods are placed by the production policy (`SchedulerState.reserve_for_bind`),
kube-scheduler's proposal per node is random (any pods of the node, unknown UIDs, any PDB count),
and whatever `Preemptor.preempt` answers must hold up: every kept node has victims, evicting the
Tessera ones makes the pod fit there per `Cluster.evaluate_without`, no victim has the
preemptor's priority or more, no victim can be given back, a dropped node is one where evicting
every eligible pod would not help, and the state is exactly as before.
"""
from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from extender_harness import GIB, node_manifest, pod_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.alloc import Cluster, Evaluation, FitFailure, PlacementPolicy, PodUid, pod_request_from_k8s
from tessera.kube.api import KubeObject
from tessera.scheduler.extender_types import ExtenderPreemptionArgs, Victims
from tessera.scheduler.preemption import PreemptSettings, Preemptor
from tessera.scheduler.state import SchedulerState, StateSettings
from tessera.scheduler.victims import Candidate, SearchLimits, choose_victims, pdb_bound

CORES = st.sampled_from([10, 20, 25, 30, 40, 50, 60, 70, 100, 200])


@dataclass
class World:
    state: SchedulerState
    pods: dict[str, KubeObject]  # uid -> pod
    node_of: dict[str, str]
    priority: dict[str, int]
    unbound: set[str]


def _pod(name: str, core: int, priority: int, memory: int | None = None) -> KubeObject:
    pod = pod_manifest(name, ("main", core, memory))
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["spec"]["priority"] = priority
    return pod


@st.composite
def worlds(draw: st.DrawFn, policy: PlacementPolicy) -> World:
    state = SchedulerState(Cluster(policy=policy), StateSettings(), clock=time.time)
    nodes = [f"n{i}" for i in range(draw(st.integers(1, 3)))]
    for name in nodes:
        state.apply_node(node_manifest(name, gpus=draw(st.integers(1, 4)), placement=draw(st.sampled_from(["binpack", "spread"]))))
    world = World(state, {}, {}, {}, set())
    for i in range(draw(st.integers(0, 10))):
        memory = draw(st.one_of(st.none(), st.sampled_from([2 * GIB, 6 * GIB])))
        core = draw(CORES)
        pod = _pod(f"p{i}", core, draw(st.integers(0, 3)), memory if core < 100 else None)
        request = pod_request_from_k8s(pod)
        node = draw(st.sampled_from(nodes))
        if isinstance(state.reserve_for_bind(request, node, priority=pod["spec"]["priority"]), FitFailure):
            continue
        uid = pod["metadata"]["uid"]
        if draw(st.integers(0, 4)):
            state.finish_bind(request.uid, bound=True)
        else:
            world.unbound.add(uid)  # a bind in flight: not in kube-scheduler's snapshot of the node yet
        world.pods[uid], world.node_of[uid], world.priority[uid] = pod, node, pod["spec"]["priority"]
    return world


@st.composite
def preemption_calls(draw: st.DrawFn, world: World) -> ExtenderPreemptionArgs:
    core = draw(CORES)
    preemptor = _pod("urgent", core, draw(st.integers(0, 4)), draw(st.one_of(st.none(), st.just(4 * GIB))) if core < 100 else None)
    proposals: dict[str, Victims] = {}
    for node in sorted(world.state.cluster.nodes) + ["not-a-tessera-node"]:
        if not draw(st.booleans()):
            continue
        on_node = sorted(uid for uid, n in world.node_of.items() if n == node)
        chosen = draw(st.lists(st.sampled_from(on_node), unique=True)) if on_node else []
        if draw(st.booleans()):
            chosen.append(f"cpu-pod-{node}")  # a pod holding no Tessera GPU
        proposals[node] = Victims(tuple(chosen), draw(st.integers(0, 2)))
    return ExtenderPreemptionArgs(preemptor, proposals)


def _snapshot(state: SchedulerState) -> object:
    return (
        dict(state.cluster.allocated()),
        {n: [(g.used_milli, g.used_memory_mib, g.shares) for g in node.gpus] for n, node in state.cluster.nodes.items()},
    )


@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.FRAGMENTATION_AWARE])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_answer_makes_room_per_gpu_and_only_lower_priority_pods_go(policy: PlacementPolicy, data: st.DataObject) -> None:
    world = data.draw(worlds(policy))
    args = data.draw(preemption_calls(world))
    state = world.state
    before = _snapshot(state)
    result = Preemptor(state, PreemptSettings(time_budget_s=60)).preempt(args)
    assert _snapshot(state) == before, "the check must leave the cache as it found it"

    request = pod_request_from_k8s(args.pod)
    mine = args.pod["spec"]["priority"]
    for node, victims in result.victims.items():
        assert victims.uids, f"{node}: kube-scheduler fails the whole preemption on a node without victims"
        assert len(set(victims.uids)) == len(victims.uids)
        tracked = [u for u in victims.uids if u in world.pods]
        for uid in victims.uids:
            if uid in world.pods:
                assert world.node_of[uid] == node, f"{uid} is not on {node}"
                assert world.priority[uid] < mine, f"victim {uid} has priority {world.priority[uid]} >= {mine}"
                assert uid not in world.unbound or uid in args.victims[node].uids, f"{uid} is not in kube-scheduler's snapshot"
            else:
                assert uid in args.victims[node].uids, f"{uid} is neither a pod on {node} nor one kube-scheduler proposed"
        assert isinstance(state.cluster.evaluate_without(request, node, [PodUid(u) for u in tracked]), Evaluation), f"{node}: the pod does not fit"
        if not isinstance(state.cluster.evaluate(request, node), Evaluation):  # a GPU victim set was needed: it is minimal
            for uid in tracked:
                rest = [PodUid(u) for u in tracked if u != uid]
                assert not isinstance(state.cluster.evaluate_without(request, node, rest), Evaluation), f"{node}: {uid} need not go"
        priorities = [world.priority[u] for u in tracked]
        assert priorities == sorted(priorities, reverse=True) or not tracked, "most important victim first"
        proposed, chosen = set(args.victims[node].uids), set(victims.uids)
        # never fewer than kube-scheduler's count allows for the proposed pods kept, plus one per pod added
        assert victims.num_pdb_violations == pdb_bound(len(chosen & proposed), len(chosen - proposed), args.victims[node].num_pdb_violations)
    for node in set(args.victims) - set(result.victims):
        if node not in state.cluster.nodes:
            continue
        eligible = [
            u for u, n in world.node_of.items()
            if n == node and world.priority[u] < mine and (u not in world.unbound or u in args.victims[node].uids)
        ]
        helps = isinstance(state.cluster.evaluate_without(request, node, [PodUid(u) for u in eligible]), Evaluation)
        fits_now = isinstance(state.cluster.evaluate(request, node), Evaluation)
        assert not helps or fits_now, f"{node} was dropped although evicting {eligible} makes room"


def test_the_search_finds_the_best_set_by_kube_schedulers_preferences() -> None:
    """Against brute force over every subset, on a node where greedy reduction is not enough."""
    # GPU 0: a (50 %, priority 1), b (25 %), c (25 %); GPU 1: d (80 %, priority 0); pod needs 50 %
    used = {0: {"a": 500, "b": 250, "c": 250}, 1: {"d": 800}}
    priority = {"a": 1, "b": 0, "c": 0, "d": 0}
    gpu_of = {uid: gpu for gpu, pods in used.items() for uid in pods}

    def fits(victims: frozenset[str]) -> bool:
        return any(1000 - sum(m for u, m in pods.items() if u not in victims) >= 500 for pods in used.values())

    candidates = [Candidate(u, priority[u], float(i), frozenset({gpu_of[u]})) for i, u in enumerate("abcd")]
    choice = choose_victims(candidates, fits, gpus=[0, 1], gpus_needed=1)
    assert choice is not None

    def key(s: frozenset[str]) -> tuple[int, int, int]:
        return (pdb_bound(0, len(s), 0), max(priority[u] for u in s), len(s))

    best = min((frozenset(s) for n in range(1, 5) for s in itertools.combinations("abcd", n) if fits(frozenset(s))), key=key)
    assert key(choice.uids) == key(best)
    assert choice.uids == {"d"}  # one pod of priority 0 beats two (b, c) and beats a (priority 1)


def test_no_victim_set_helps_when_evicting_everyone_is_not_enough() -> None:
    candidates = [Candidate("a", 0, 0.0, frozenset({0}))]
    assert choose_victims(candidates, lambda victims: False, gpus=[0], gpus_needed=1) is None


@pytest.mark.parametrize(
    ("kept_proposed", "added", "violations", "bound"),
    [(2, 0, 0, 0), (2, 0, 1, 1), (1, 0, 3, 1), (0, 2, 0, 2), (1, 1, 1, 2)],
)
def test_pdb_bound_never_undercounts_what_kube_scheduler_told_us(kept_proposed: int, added: int, violations: int, bound: int) -> None:
    assert pdb_bound(kept_proposed, added, violations) == bound


def _reference_answer(world: World, args: ExtenderPreemptionArgs) -> dict[str, tuple[tuple[str, ...], int]]:
    """/preempt's answer restated from its specification (docs/scheduler-extender.md,
    "Preemption") and found by brute force over every subset of the eligible pods: nothing of
    `preemption` or `victims` is used but `pdb_bound`. Per node: the victims, most important
    first, and the PodDisruptionBudget count."""
    state = world.state
    request = pod_request_from_k8s(args.pod)
    mine = args.pod["spec"]["priority"]
    out: dict[str, tuple[tuple[str, ...], int]] = {}
    for node, proposal in args.victims.items():
        if node not in state.cluster.nodes:
            continue
        if any(uid in world.node_of and world.node_of[uid] != node for uid in proposal.uids):
            continue  # kube-scheduler and the extender disagree on where a pod is
        proposed = set(proposal.uids)
        held = {uid for uid, n in world.node_of.items() if n == node}
        passthrough = [uid for uid in proposal.uids if uid not in held]
        eligible = sorted(uid for uid in held if world.priority[uid] < mine and (uid not in world.unbound or uid in proposed))

        def fits(victims: Sequence[str], node: str = node) -> bool:
            return isinstance(state.cluster.evaluate_without(request, node, [PodUid(u) for u in victims]), Evaluation)

        def key(victims: Sequence[str]) -> tuple[int, int, int, int, tuple[str, ...]]:
            kept = sum(1 for u in victims if u in proposed)
            # kube-scheduler's order: PDB violations, top priority, count, priority sum (start
            # times tie: no pod of these worlds has started), then the UIDs for determinism
            return (
                pdb_bound(kept + len(passthrough), len(victims) - kept, proposal.num_pdb_violations),
                max(world.priority[u] for u in victims),
                len(victims),
                sum(world.priority[u] for u in victims),
                tuple(sorted(victims)),
            )

        if not fits(eligible):
            continue
        if fits([]):
            chosen = [uid for uid in eligible if uid in proposed]
            violations = min(proposal.num_pdb_violations, len(chosen) + len(passthrough))
        else:
            subsets = (list(s) for n in range(1, len(eligible) + 1) for s in itertools.combinations(eligible, n))
            chosen = min((s for s in subsets if fits(s)), key=key)
            violations = key(chosen)[0]
        if not chosen and not passthrough:
            continue
        # most important first; a proposed pod of unknown priority ranks no higher than the known
        # pod kube-scheduler listed before it, then by where it was listed
        priority: dict[str, float] = {}
        ceiling = math.inf
        for uid in proposal.uids:
            if uid in eligible:
                ceiling = world.priority[uid]
            priority[uid] = world.priority[uid] if uid in eligible else ceiling
        listed = {uid: i for i, uid in enumerate(proposal.uids)}
        victims = sorted([*passthrough, *chosen], key=lambda u: (-priority.get(u, world.priority.get(u, 0)), listed.get(u, len(listed)), u))
        out[node] = (tuple(victims), violations)
    return out


@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.FRAGMENTATION_AWARE])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_answers_equal_a_brute_force_over_every_victim_set(policy: PlacementPolicy, data: st.DataObject) -> None:
    """On small nodes (at most 10 pods in the whole world) the search with unbounded checks
    finds what trying every subset finds, and the answer carries it in kube-scheduler's order."""
    world = data.draw(worlds(policy))
    args = data.draw(preemption_calls(world))
    unbounded = PreemptSettings(time_budget_s=60, limits=SearchLimits(max_checks=1_000_000, exact_pods=16, max_groups=1_000_000))
    result = Preemptor(world.state, unbounded).preempt(args)
    assert {node: (v.uids, v.num_pdb_violations) for node, v in result.victims.items()} == _reference_answer(world, args)
