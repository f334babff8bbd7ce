"""Trace replay through the production placement code (`tessera.alloc.Cluster`).

Pods arrive one at a time and are never deleted; a pod that fits nowhere fails and is not
retried. With `order=shuffle` and `inflate=1.3` this is the FGD paper's experiment: pods sorted
by name, shuffled with the seed, then pods sampled with replacement from the trace appended
until the GPU request reaches 1.3x capacity; ties between equal scores go to a fixed ranking of
nodes shuffled with the seed. x (arrived %) = GPU requested by every arrived pod, placed or not,
as % of capacity; y (allocated %) = GPU allocated as % of capacity; both in milli-GPUs.
Python's `random.Random(seed)` replaces the authors' Go generator, so individual seeds do not
reproduce their runs; the mean over seeds 42..51 is what compares.
"""
from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum

from tessera.alloc import DEFAULT_POLICY, MILLI_PER_GPU, Cluster, NodeState, PlacementPolicy, PodRequest, PodUid, static_snapshot
from tessera.sim.dra_route import DraPlacer, Route
from tessera.sim.trace import TracePod

POINT_STEP_PCT = 5
POINT_MAX_PCT = 130
EXTRA_POINTS_PCT = (98,)
MAX_INFLATE = 10.0  # the paper uses 1.3; far beyond capacity every extra pod just fails


class Order(str, Enum):
    CREATION = "creation"  # by creation_time, then name (file order when the column is absent)
    SHUFFLE = "shuffle"  # the paper: sort by name, shuffle with the seed


@dataclass(frozen=True)
class ReplaySettings:
    policy: PlacementPolicy = DEFAULT_POLICY
    """Default: the production default policy, so the planner answers for what will run."""
    order: Order = Order.CREATION
    """Default creation order (the trace as it happened); `shuffle` for the paper's method."""
    inflate: float = 1.0
    """Sampled pods are appended until the GPU request reaches this multiple of capacity (at most
    MAX_INFLATE). Default 1.0: a trace asking for less than the cluster is topped up to 100 %, one
    asking for more is replayed as it is; the paper uses 1.3."""
    seed: int = 42
    """Default 42, the first of the paper's seeds 42..51."""
    route: Route = Route.DEVICE_PLUGIN
    """How pods reach their GPUs: the device-plugin route (the Cluster's own placement), or a
    dra pool's (`tessera.sim.dra_route`): the policy's node with kube-scheduler's first-fit
    devices, or kube-scheduler alone."""


@dataclass(frozen=True)
class Point:
    arrived_pct: float
    allocated_pct: float
    failed_pods: int


@dataclass(frozen=True)
class ReplayResult:
    policy: PlacementPolicy
    capacity_gpus: int
    pods: int  # arrived: the trace's pods plus those sampled to inflate it
    failed_pods: int
    points: tuple[Point, ...]
    failed_by_shape: dict[str, int] = field(default_factory=dict)
    nodes: int = 0
    trace_pods: int = 0  # pods read from the trace (the rest of `pods` were sampled from them)
    requested_milli: int = 0  # GPU requested by every arrived pod, placed or not
    allocated_milli: int = 0  # GPU allocated to the placed pods

    @property
    def placed_pods(self) -> int:
        return self.pods - self.failed_pods

    @property
    def requested_pct(self) -> float:
        return self.requested_milli * 100 / max(self.capacity_gpus * MILLI_PER_GPU, 1)

    @property
    def allocated_pct(self) -> float:
        return self.allocated_milli * 100 / max(self.capacity_gpus * MILLI_PER_GPU, 1)

    @property
    def final(self) -> Point:
        return self.points[-1]

    def allocated_at(self, arrived_pct: float) -> float | None:
        for p in self.points:
            if abs(p.arrived_pct - arrived_pct) < 1e-9:
                return p.allocated_pct
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "capacity_gpus": self.capacity_gpus,
            "points": [
                {"arrived_pct": p.arrived_pct, "allocated_pct": p.allocated_pct, "failed_pods": p.failed_pods} for p in self.points
            ],
        }


def thresholds() -> list[float]:
    return sorted({float(x) for x in range(POINT_STEP_PCT, POINT_MAX_PCT + 1, POINT_STEP_PCT)} | {float(x) for x in EXTRA_POINTS_PCT})


def _ordered(pods: Sequence[TracePod], settings: ReplaySettings) -> tuple[list[PodRequest], random.Random]:
    if settings.order is Order.SHUFFLE:
        ordered = sorted(pods, key=lambda p: p.request.name or str(p.request.uid))
        rng = random.Random(settings.seed)
        rng.shuffle(ordered)
    else:
        ordered = sorted(pods, key=lambda p: p.creation_time)  # stable: file order on ties
        rng = random.Random(settings.seed)
    return [p.request for p in ordered], rng


def _plan(pods: Sequence[TracePod], settings: ReplaySettings, capacity_milli: int) -> Iterator[tuple[PodRequest, int]]:
    """(trace pod, n): n = 0 for the trace's own arrivals, n > 0 for the n-th sampled copy."""
    originals, rng = _ordered(pods, settings)
    requested = 0
    for pod in originals:
        requested += pod.gpu_milli_total
        yield pod, 0
    target = settings.inflate * capacity_milli
    if not any(p.gpu_milli_total for p in originals):
        return
    extra = 0
    while requested < target:
        base = rng.choice(originals)
        extra += 1
        requested += base.gpu_milli_total
        yield base, extra


def _copy(base: PodRequest, extra: int) -> PodRequest:
    if not extra:
        return base
    return PodRequest(
        PodUid(f"{base.uid}-inflate-{extra}"), base.containers, base.cpu_milli, base.memory_mib,
        base.gpu_models, base.app_class, base.namespace, f"{base.name}-inflate-{extra}",
    )


def iter_arrivals(pods: Sequence[TracePod], settings: ReplaySettings, capacity_milli: int) -> Iterator[PodRequest]:
    """The arrival sequence, one pod at a time: ordered, then inflated with pods sampled with
    replacement. Sampled pods are made as they arrive, so a large `inflate` costs time, not memory."""
    return (_copy(base, extra) for base, extra in _plan(pods, settings, capacity_milli))


def count_arrivals(pods: Sequence[TracePod], settings: ReplaySettings, capacity_milli: int) -> int:
    return sum(1 for _ in _plan(pods, settings, capacity_milli))


def arrival_order(pods: Sequence[TracePod], settings: ReplaySettings, capacity_milli: int) -> list[PodRequest]:
    """`iter_arrivals` as a list (tests and small traces)."""
    return list(iter_arrivals(pods, settings, capacity_milli))


def replay(
    nodes: Sequence[NodeState],
    pods: Sequence[TracePod],
    settings: ReplaySettings = ReplaySettings(),
    on_progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Replay `pods` on a fresh copy of `nodes`; `on_progress(done, total)` about every 1 %."""
    fresh = [copy.deepcopy(n) for n in nodes]
    fixed_mix = static_snapshot(p.request for p in pods) if settings.policy is PlacementPolicy.FGD else None
    cluster = Cluster(fresh, policy=settings.policy, fixed_mix=fixed_mix, seed=settings.seed)
    ranking = sorted(n.name for n in fresh)
    random.Random(settings.seed).shuffle(ranking)
    cluster.set_tie_ranking(ranking)
    placer = None if settings.route is Route.DEVICE_PLUGIN else DraPlacer(cluster, settings.route, ranking)
    capacity = cluster.usage().capacity_milli
    total = count_arrivals(pods, settings, capacity) if on_progress is not None else 0
    learns = settings.policy is PlacementPolicy.FRAGMENTATION_AWARE

    marks = thresholds()
    points: list[Point] = []
    requested = allocated = failed = 0
    failed_by_shape: dict[str, int] = {}
    step = max(1, total // 100)
    done = 0
    for done, pod in enumerate(iter_arrivals(pods, settings, capacity), start=1):
        if learns:
            cluster.observe(pod)
        # A point for x% is the state after the last pod that keeps the arrived request <= x%.
        while marks and (requested + pod.gpu_milli_total) * 100 > marks[0] * capacity:
            points.append(Point(marks.pop(0), round(allocated * 100 / capacity, 4), failed))
        placement = cluster.schedule(pod) if placer is None else placer.place(pod)
        requested += pod.gpu_milli_total
        if placement is None:
            failed += 1
            shape = _shape_label(pod)
            failed_by_shape[shape] = failed_by_shape.get(shape, 0) + 1
        else:
            cluster.reserve(pod, placement)
            allocated += pod.gpu_milli_total
        if on_progress is not None and (done % step == 0 or done == total):
            on_progress(done, total)
    while marks and requested * 100 >= marks[0] * capacity:
        points.append(Point(marks.pop(0), round(allocated * 100 / capacity, 4), failed))
    points.append(Point(round(requested * 100 / capacity, 4), round(allocated * 100 / capacity, 4), failed))
    return ReplayResult(
        settings.policy, capacity // MILLI_PER_GPU, done, failed, tuple(points), failed_by_shape,
        nodes=len(fresh), trace_pods=len(pods), requested_milli=requested, allocated_milli=allocated,
    )


def _shape_label(pod: PodRequest) -> str:
    """What a pod asked for, in words: "2 GPUs", "0.47 GPU", "CPU only"."""
    gpu = pod.gpu_containers
    if not gpu:
        return "CPU only"
    c = gpu[0]
    if c.gpu_milli >= MILLI_PER_GPU:
        return f"{c.gpu_count} GPU" + ("s" if c.gpu_count > 1 else "")
    return f"{c.gpu_milli / MILLI_PER_GPU:g} GPU"
