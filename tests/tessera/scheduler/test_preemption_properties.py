"""Properties of /preempt's victim choice, checked against the production fit code.

Random nodes and pods are placed by the production policy (`SchedulerState.reserve_for_bind`),
kube-scheduler's proposal per node is random (any pods of the node, unknown UIDs, any PDB count),
and whatever `Preemptor.preempt` answers must hold up: every kept node has victims, evicting the
Tessera ones makes the pod fit there per `Cluster.evaluate_without`, no victim has the
preemptor's priority or more, no victim can be given back, a dropped node is one where evicting
every eligible pod would not help, and the state is exactly as before. On small nodes, and on
nodes where every pod must go, the answer is what trying every subset finds; on a node of 2,000
such pods each pod is moved a bounded number of times.
"""
from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pytest
from extender_harness import GIB, node_manifest, pod_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from victim_search_reference import reference_choice

from tessera.alloc import Cluster, ContainerRequest, Evaluation, FitFailure, PlacementPolicy, PodRequest, PodUid, pod_request_from_k8s
from tessera.alloc.eviction import SetAside
from tessera.kube.api import KubeObject
from tessera.scheduler.extender_types import ExtenderPreemptionArgs, Victims
from tessera.scheduler.preemption import PreemptSettings, Preemptor
from tessera.scheduler.state import SchedulerState, StateSettings
from tessera.scheduler.victims import Candidate, SearchLimits, SetTrial, choose_victims, pdb_bound

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
    choice = choose_victims(candidates, SetTrial(fits), gpus=[0, 1], gpus_needed=1)
    assert choice is not None

    def key(s: frozenset[str]) -> tuple[int, int, int]:
        return (pdb_bound(0, len(s), 0), max(priority[u] for u in s), len(s))

    best = min((frozenset(s) for n in range(1, 5) for s in itertools.combinations("abcd", n) if fits(frozenset(s))), key=key)
    assert key(choice.uids) == key(best)
    assert choice.uids == {"d"}  # one pod of priority 0 beats two (b, c) and beats a (priority 1)


def test_no_victim_set_helps_when_evicting_everyone_is_not_enough() -> None:
    candidates = [Candidate("a", 0, 0.0, frozenset({0}))]
    assert choose_victims(candidates, SetTrial(lambda victims: False), gpus=[0], gpus_needed=1) is None


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


@st.composite
def crowded_nodes(draw: st.DrawFn, policy: PlacementPolicy) -> tuple[World, ExtenderPreemptionArgs]:
    """One node with lower-priority shares on each of its GPUs, and a preemptor asking for every
    GPU of the node whole: every pod must go, so kube-scheduler's reprieve gives none back."""
    state = SchedulerState(Cluster(policy=policy), StateSettings(), clock=time.time)
    gpus = draw(st.integers(1, 2))
    state.apply_node(node_manifest("n0", gpus=gpus))
    world = World(state, {}, {}, {}, set())
    for i in range(draw(st.integers(1, 8))):
        pod = _pod(f"p{i}", draw(st.sampled_from([10, 20, 25, 30, 50])), draw(st.integers(0, 3)))
        request = pod_request_from_k8s(pod)
        if isinstance(state.reserve_for_bind(request, "n0", priority=pod["spec"]["priority"]), FitFailure):
            continue
        state.finish_bind(request.uid, bound=True)
        uid = pod["metadata"]["uid"]
        world.pods[uid], world.node_of[uid], world.priority[uid] = pod, "n0", pod["spec"]["priority"]
    on_node = sorted(world.pods)
    proposed = draw(st.lists(st.sampled_from(on_node), unique=True, min_size=1))
    return world, ExtenderPreemptionArgs(_pod("urgent", 100 * gpus, 4), {"n0": Victims(tuple(proposed), draw(st.integers(0, 2)))})


LIMITS = {
    "default": SearchLimits(),
    "one-check": SearchLimits(max_checks=1, exact_pods=2, max_groups=1),
    "unbounded": SearchLimits(max_checks=1_000_000, exact_pods=16, max_groups=1_000_000),
}


@pytest.mark.parametrize("limits", list(LIMITS))
@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.FRAGMENTATION_AWARE])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_a_node_where_every_pod_must_go_is_answered_with_every_pod(policy: PlacementPolicy, limits: str, data: st.DataObject) -> None:
    """kube-scheduler's reprieve asks about every pod and gives none back: the answer is what
    trying every subset finds, every pod of the node, whatever the search's limits."""
    world, args = data.draw(crowded_nodes(policy))
    before = _snapshot(world.state)
    result = Preemptor(world.state, PreemptSettings(time_budget_s=60, limits=LIMITS[limits])).preempt(args)
    assert _snapshot(world.state) == before
    assert {node: (v.uids, v.num_pdb_violations) for node, v in result.victims.items()} == _reference_answer(world, args)
    assert set(result.victims["n0"].uids) == set(world.pods)


def test_the_reprieve_moves_each_pod_a_bounded_number_of_times() -> None:
    """2,000 pods of 1 milli-GPU fill two GPUs, and the preemptor wants both whole: the
    reprieve asks 2,000 times, and each question moves the pods that changed since the one
    before, not every victim (that was 2,000 x 2,000 releases and restores). Every pod is a
    victim, listed most important first, and the cache is as before."""
    state = SchedulerState(Cluster(policy=PlacementPolicy.FRAGMENTATION_AWARE), StateSettings(), clock=time.time)
    state.apply_node(node_manifest("n0", gpus=2))
    uids: list[str] = []
    for i in range(2000):
        request = PodRequest(PodUid(f"low-{i:04d}"), (ContainerRequest("main", 1, 1),), name=f"low-{i:04d}")
        assert not isinstance(state.reserve_for_bind(request, "n0", priority=i % 3), FitFailure)
        state.finish_bind(request.uid, bound=True)
        uids.append(request.uid)
    moved = 0
    set_aside = state.cluster.set_aside

    def counting(node_name: str, evict: Iterable[PodUid], put_back: Iterable[SetAside] = ()) -> list[SetAside]:
        nonlocal moved
        returning = list(put_back)
        taken = set_aside(node_name, evict, returning)
        moved += len(taken) + len(returning)
        return taken

    state.cluster.set_aside = counting  # type: ignore[method-assign]
    before = _snapshot(state)
    result = Preemptor(state, PreemptSettings(time_budget_s=600)).preempt(ExtenderPreemptionArgs(_pod("urgent", 200, 5), {"n0": Victims(tuple(uids), 0)}))
    assert _snapshot(state) == before
    victims = result.victims["n0"].uids
    assert sorted(victims) == sorted(uids)
    assert [int(uid.split("-")[1]) % 3 for uid in victims] == sorted((i % 3 for i in range(2000)), reverse=True)
    assert moved <= 8 * len(uids), moved


@st.composite
def monotone_checks(draw: st.DrawFn) -> tuple[list[Candidate], Callable[[frozenset[str]], bool], SearchLimits, int, int]:
    """Candidates on up to 3 GPUs and a fit check that is monotone in the victims (the pod fits
    once any of a few sets is gone), with random limits."""
    gpus = draw(st.integers(1, 3))
    candidates = [
        Candidate(f"u{i:02d}", draw(st.integers(0, 3)), float(draw(st.integers(0, 5))), frozenset(draw(st.sets(st.integers(0, gpus - 1), min_size=1))), draw(st.booleans()))
        for i in range(draw(st.integers(1, 24)))
    ]
    uids = [c.uid for c in candidates]
    enough = draw(st.lists(st.frozensets(st.sampled_from(uids), max_size=10), max_size=4))
    if draw(st.booleans()):
        enough.append(frozenset(uids))  # every pod must go
    limits = SearchLimits(max_checks=draw(st.integers(0, 20)), exact_pods=draw(st.integers(0, 8)), max_groups=draw(st.integers(1, 8)))
    needed = draw(st.integers(1, gpus))
    return candidates, lambda victims: any(need <= victims for need in enough), limits, needed, draw(st.integers(1, needed))


@settings(max_examples=500, deadline=None)
@given(checks=monotone_checks())
def test_the_search_asks_what_its_specification_asks_check_for_check(checks: tuple[list[Candidate], Callable[[frozenset[str]], bool], SearchLimits, int, int]) -> None:
    """Against the search written one whole set per check (`victim_search_reference`), under
    random limits: the same sets asked in the same order (so the same checks counted against
    the limits, and no set asked twice), the same choice; and the choice fits and no pod of it
    could be given back."""
    candidates, fits, limits, needed, smallest = checks
    asked: list[frozenset[str]] = []
    expected: list[frozenset[str]] = []

    def recorded(into: list[frozenset[str]]) -> Callable[[frozenset[str]], bool]:
        def check(victims: frozenset[str]) -> bool:
            into.append(victims)
            return fits(victims)

        return check

    choice = choose_victims(candidates, SetTrial(recorded(asked)), gpus=range(3), gpus_needed=needed, smallest_group=smallest, limits=limits)
    assert choice == reference_choice(candidates, recorded(expected), gpus=range(3), gpus_needed=needed, smallest_group=smallest, limits=limits)
    assert asked == expected
    assert len(asked) == len(set(asked)), "a victim set was checked twice"
    assert (choice is None) == (not fits(frozenset(c.uid for c in candidates)))
    if choice is not None:
        assert fits(choice.uids)
        for uid in choice.uids:
            assert not fits(choice.uids - {uid}), f"{uid} need not go"
