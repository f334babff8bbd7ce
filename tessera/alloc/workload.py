"""The workload mix: which pod shapes arrive and how often, as FGD's "typical pods".

FGD measures a node's fragmentation against the distribution of pod shapes. The paper takes it
from the whole trace up front; a live cluster does not know the future, so `WorkloadMix` learns it
from arrivals with exponential decay (the extender feeds it every pod it sees in /filter, the
simulator every arriving pod). Policies read an immutable `MixSnapshot`; a new snapshot (new
`epoch`) is taken only when the estimate has drifted, so per-node score caches stay valid between.

The weights are kept per pod shape, and shapes come from requests (one may name hundreds of GPU
models), so what they hold is bounded in bytes (`MixSettings.shape_bytes`).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from tessera.alloc.interning import SLOT_BYTES, approx_bytes
from tessera.alloc.model import PodRequest

# (gpu_count, gpu_milli, gpu_memory_mib or None, cpu_milli, host memory MiB, gpu models or None)
ShapeKey = tuple[int, int, int | None, int, int, frozenset[str] | None]
MiB: Final = 1024 * 1024

WEIGHT_BYTES: Final = SLOT_BYTES + 24
"""Estimated bytes of one shape's weight besides its key (`approx_bytes` of the key, once, when
the shape is first seen): the dict's slot and the float. Measured with tracemalloc, what the
weights give back per shape against the estimate: 262 against 368 bytes without GPU models,
531 against 737 with two, 2,579 against 7,619 with fifty of 50 characters."""


@dataclass(frozen=True)
class TypicalShape:
    """One pod shape of the mix, with its probability. A multi-container pod is folded into its
    largest GPU container (fragmentation is about what one GPU or node can still take)."""

    gpu_count: int
    gpu_milli: int
    gpu_memory_mib: int | None
    cpu_milli: int
    memory_mib: int
    gpu_models: frozenset[str] | None
    weight: float


@dataclass(frozen=True)
class MixSnapshot:
    epoch: int
    shapes: tuple[TypicalShape, ...]
    limited: tuple[tuple[frozenset[str], float], ...] = ()
    """Pods limited to GPU models: (models, share of the mix's GPU demand), counting the shapes
    too rare to be kept in `shapes` (limited pods spread over many rare shapes; model pressure
    needs their whole demand). Empty when no pod names GPU models. Refreshed as limited pods
    arrive (`MixSettings.limited_refresh_ratio`), between the shapes' drift checks."""
    rare_multi: tuple[TypicalShape, ...] = ()
    """Multi-GPU shapes too rare for `shapes` but seen recently (`MixSettings.min_weight_multi`):
    reservations guard their hosts; the fragmentation measure does not weigh them (it would cost
    every evaluation a few more shapes for a weight under 0.2 %)."""


def limited_demand(weights: dict[ShapeKey, float]) -> tuple[tuple[frozenset[str], float], ...]:
    """`MixSnapshot.limited` of shape weights (any scale)."""
    total = 0.0
    by_models: dict[frozenset[str], float] = {}
    for (count, milli, _, _, _, models), w in weights.items():
        demand = w * count * milli
        total += demand
        if models is not None and demand > 0:
            by_models[models] = by_models.get(models, 0.0) + demand
    if total <= 0:
        return ()
    return tuple((models, d / total) for models, d in sorted(by_models.items(), key=lambda kv: sorted(kv[0])))


def shape_of(pod: PodRequest) -> ShapeKey:
    gpu = pod.gpu_containers
    if not gpu:
        return (0, 0, None, pod.cpu_milli, pod.memory_mib, pod.gpu_models)
    big = max(gpu, key=lambda c: c.total_milli)
    count = sum(c.gpu_count for c in gpu if c.whole) if big.whole else 1
    return (count, big.gpu_milli, big.gpu_memory_mib, pod.cpu_milli, pod.memory_mib, pod.gpu_models)


def static_snapshot(pods: Iterable[PodRequest], *, epoch: int = 0) -> MixSnapshot:
    """The mix of a known pod list, weighted by pod count (what the FGD paper does)."""
    counts: dict[ShapeKey, float] = {}
    for pod in pods:
        key = shape_of(pod)
        counts[key] = counts.get(key, 0.0) + 1.0
    return _snapshot(counts, epoch, limited_demand(counts))


def _snapshot(
    weights: dict[ShapeKey, float], epoch: int, limited: tuple[tuple[frozenset[str], float], ...] = (), rare: dict[ShapeKey, float] | None = None
) -> MixSnapshot:
    """`rare`: weights (fractions of all arrivals) of the multi-GPU shapes kept for reservations only."""
    total = sum(weights.values())
    if total <= 0:
        return MixSnapshot(epoch, (), limited)
    shapes = tuple(
        TypicalShape(*key, weight=w / total) for key, w in sorted(weights.items(), key=lambda kv: (-kv[1], repr(kv[0])))
    )
    rare_multi = tuple(TypicalShape(*key, weight=w) for key, w in sorted((rare or {}).items(), key=lambda kv: (-kv[1], repr(kv[0]))))
    return MixSnapshot(epoch, shapes, limited, rare_multi)


@dataclass
class MixSettings:
    """How the live mix estimate learns and when policies see a new one."""

    half_life_pods: float = 2000.0
    """Default 2000 arrivals: long enough to smooth bursts of one job's replicas, short enough to
    follow a day/night change of the mix within a few thousand pods."""
    drift_threshold: float = 0.1
    """Default 0.1 (L1 distance): a new snapshot only when the mix moved this much, because each
    new snapshot invalidates every cached node score."""
    first_snapshot_after: int = 16
    """Default 16 pods: until then the prior (whole single-GPU pods) is used; then snapshots are
    considered after 16, 32, 64, ... pods (see `snapshot_growth`) and every `max_interval` pods
    after that, because the estimate's noise shrinks with the pods seen and a snapshot costs a
    rescoring of nodes. (Measured: checking at 64, 256, 1024 only cost ~0.1 % allocation.)"""
    snapshot_growth: int = 2
    """Default 2: check points grow geometrically by this factor (16, 32, 64, ...)."""
    max_interval: int = 4096
    """Default 4096 pods between snapshot checks once the estimate has settled."""
    min_weight: float = 0.002
    """Default 0.2 %: shapes rarer than this are dropped from snapshots (FGD keeps the popular
    shapes too); it bounds the cost of the fragmentation measure. A multi-GPU shape counts its
    GPUs (an 8-GPU shape is kept from 0.025 % of the pods): a rare 8-GPU pod is a large demand,
    and the nodes able to host it are what reservations keep."""
    min_weight_multi: float | None = 1e-5
    """Default 1e-5: a multi-GPU shape stays in snapshots (`MixSnapshot.rare_multi`, for
    reservations only) down to this weight instead of being dropped under `min_weight`; None:
    dropped. It keeps the reservation for 8-GPU 120-core pods (~0.03 % of openb cpu072's pods)
    that the decayed estimate otherwise drops (cpu072 seed 42: such a pod failed at 89.4 %
    arrived; with it -0.06 -> +0.00 against FGD at 90 %; cpu250 seed 1002: -0.13 -> +0.00).
    Its guards hold only while CPU is plentiful (`FragAwareSettings.rare_multi_need_cpu`): held
    regardless, on the CPU-bound cpu300 the kept reservations cost 0.2 at 100 % arrived (seed
    1001: 86.20 against 86.40 without, FGD 86.31); gated, 86.48. Measured 2026-11-26."""
    limited_refresh_ratio: float = 2.0
    """Default 2: a new snapshot as soon as a limited pod (one naming GPU models) arrives whose
    model set is new to the snapshot's `limited`, or whose share moved beyond this factor (0:
    only at the regular check points, where the shapes' drift decides). Limited pods are few and
    arrive late, and the pressure on their models is what keeps the models for them; with the
    regular checks alone the snapshot kept the `limited` of its last drift (openb gpuspec05:
    P100-only pods unknown at 8 % arrived while any-model pods filled the P100 nodes). Costs up
    to ~a dozen extra snapshots per model set, each a rescoring of the nodes."""
    shape_bytes: int = 8 * MiB
    """Default 8 MiB: the most the decayed weights per pod shape may hold (`WEIGHT_BYTES` and
    the key's own size each: ~23,000 shapes without GPU models; the openb traces bring at most
    ~280). Past it the lightest shapes (the rarest, or seen longest ago) are dropped until the
    weights hold half of it: ~11,000 shapes stay, so every shape weighing more than 1/11,000 of
    the arrivals does, those of at least `min_weight` among them; only multi-GPU shapes kept for
    reservations down to `min_weight_multi` can go."""


# Before any pod has been seen, assume whole single-GPU pods: idle compute that is not a whole
# free GPU counts as stranded, which makes the policy pack shares (a safe starting point).
DEFAULT_PRIOR = MixSnapshot(0, (TypicalShape(1, 1000, None, 0, 0, None, 1.0),))


@dataclass
class WorkloadMix:
    """Decayed estimate of the arriving pod shapes. Not thread-safe (callers hold their lock)."""

    settings: MixSettings = field(default_factory=MixSettings)
    prior: MixSnapshot | None = None
    _weights: dict[ShapeKey, float] = field(default_factory=dict)
    _weights_bytes: int = 0  # the estimate of `_weights` (`WEIGHT_BYTES` and each key's size)
    _increment: float = 1.0
    _snapshot: MixSnapshot = DEFAULT_PRIOR
    _seen: int = 0
    _next_check: int = 0
    _limited_stale: bool = False

    def __post_init__(self) -> None:
        self._next_check = self.settings.first_snapshot_after
        if self.prior is not None:
            self._snapshot = self.prior
            for s in self.prior.shapes:
                key = (s.gpu_count, s.gpu_milli, s.gpu_memory_mib, s.cpu_milli, s.memory_mib, s.gpu_models)
                self._weights[key] = s.weight
            self._count_bytes()

    @property
    def estimated_bytes(self) -> int:
        """What the weights hold now, by the estimate their budget is kept with."""
        return self._weights_bytes

    def observe(self, pod: PodRequest) -> None:
        # Decay by growing the increment instead of shrinking every weight: O(1) per arrival.
        self._seen += 1
        self._increment *= math.exp(math.log(2.0) / self.settings.half_life_pods)
        key = shape_of(pod)
        weight = self._weights.get(key)
        if weight is None:
            self._weights[key] = self._increment
            self._weights_bytes += WEIGHT_BYTES + approx_bytes(key)
            if self._weights_bytes > self.settings.shape_bytes:
                self._drop_lightest()
        else:
            self._weights[key] = weight + self._increment
        if key[5] is not None and key[0] > 0 and self.settings.limited_refresh_ratio > 0:
            ratio = self.settings.limited_refresh_ratio
            old = dict(self._snapshot.limited)
            for models, share in limited_demand(self._weights):
                was = old.get(models)
                if was is None or not was / ratio <= share <= was * ratio:
                    self._limited_stale = True
                    break
        if self._increment > 1e100:
            self._weights = {k: w / self._increment for k, w in self._weights.items() if w / self._increment > 1e-12}
            self._increment = 1.0
            self._count_bytes()

    def _drop_lightest(self) -> None:
        """Past the byte budget: the lightest shapes go until the weights hold half of it (the
        others keep their order, so sums over them add in the same order as before)."""
        room = self.settings.shape_bytes // 2
        keep: set[ShapeKey] = set()
        for key, _ in sorted(self._weights.items(), key=lambda kv: kv[1], reverse=True):
            size = WEIGHT_BYTES + approx_bytes(key)
            if size > room:
                break
            room -= size
            keep.add(key)
        self._weights = {k: w for k, w in self._weights.items() if k in keep}
        self._count_bytes()

    def _count_bytes(self) -> None:
        self._weights_bytes = sum(WEIGHT_BYTES + approx_bytes(key) for key in self._weights)

    def current(self) -> dict[ShapeKey, float]:
        total = sum(self._weights.values())
        if total <= 0:
            return {}
        return {k: w / total for k, w in self._weights.items()}

    def snapshot(self) -> MixSnapshot:
        """The mix policies should use now: a new epoch only at a check point and after drift."""
        if self._limited_stale:
            self._limited_stale = False
            self._snapshot = MixSnapshot(self._snapshot.epoch + 1, self._snapshot.shapes, limited_demand(self._weights), self._snapshot.rare_multi)
        if self._seen < self._next_check:
            return self._snapshot
        self._next_check = self._seen + min(self.settings.max_interval, (self.settings.snapshot_growth - 1) * self._seen)
        floor, multi = self.settings.min_weight, self.settings.min_weight_multi
        current = self.current()
        now = {k: w for k, w in current.items() if w * max(k[0], 1) >= floor}
        if not now:
            return self._snapshot
        old = {(s.gpu_count, s.gpu_milli, s.gpu_memory_mib, s.cpu_milli, s.memory_mib, s.gpu_models): s.weight for s in self._snapshot.shapes}
        drift = sum(abs(now.get(k, 0.0) - old.get(k, 0.0)) for k in now.keys() | old.keys())
        if drift > self.settings.drift_threshold:
            rare = {k: w for k, w in current.items() if multi is not None and k[0] >= 2 and k not in now and w >= multi}
            self._snapshot = _snapshot(now, self._snapshot.epoch + 1, limited_demand(self._weights), rare)
        return self._snapshot
