"""Fragmentation-driven policies: faithful FGD and Tessera's fragmentation-aware default.

Both score a node by how much placing the pod there increases the node's expected fragmentation
(`FragmentationMeasure`) and pick, inside the node, the GPU whose use strands the least.

FGD as published (`faithful=True`): the paper's measure (GPU compute and CPU only), the score is
`int(100 * sigmoid(-increase / 1000))` as in the authors' scheduler plugin (so nearby increases
tie and the seeded node ranking decides), whole GPUs are the lowest-indexed idle ones.

Tessera's fragmentation-aware policy differs where it measurably helps (docs/scheduling.md):
- host stranding: the increase also counts the GPU compute the node's CPU and RAM can no longer
  feed at the mix's CPU and RAM per GPU (`HostDemand`), which FGD's one-pod-ahead test misses;
- GPU memory and host memory are dimensions of the measure (a GPU with compute but no memory
  left for a typical pod is stranded);
- multi-GPU shapes weigh like N pods while they are rare, and equal bands go to the node with
  fewer GPUs, which keeps whole nodes free for 8-GPU pods; once few nodes can still host a
  multi-GPU shape of the mix, those are reserved for it (`Reservations`, a cluster-wide count),
  and nodes that are the only possible hosts of a scarce multi-GPU shape cost a little to break
  at any load (`Reservations.scarce_loss`);
- model pressure: a pod that accepts several GPU models avoids the models that pods limited to
  them will be short of (`ModelPressure`), and keeps a model whole once its free compute nears
  a few times what those pods will take;
- the mix is learned online (`WorkloadMix`), in the simulator as in the extender.

One evaluation, several ways, each equal to the last bit to the plain one (`reference`, which
tests/tessera/alloc/test_reference_equivalence.py holds every other to). Two ways are needed for
speed: the simulator replays one node at a time, where numpy's set-up (~0.2 ms a batch) would
cost more than the node, while the extender meets hundreds of candidate nodes with one pod,
where a Python loop per node is the whole tail of its latency (docs/benchmarks.md). So:
- the GPU choice and increase: `_evaluate_simple` (one node; the memoised measure and its
  per-GPU variants) and `frag_simple.SimpleBatch` (many nodes; `frag_batch`'s arrays), for a
  one-container pod without model or co-location preference; every other pod, one way only:
  `reference.fragmentation_increase` with the memoised measure;
- the score: `_finish` (one node) calls the reference's (`reference.fgd_key`,
  `reference.AwareTerms.key`); `FragmentationAwarePolicy._finish_many` computes its terms over
  all nodes at once (`HostDemand.unfed_increase_many`, `frag_batch.sigmoid_scores`, the
  reservations' batch calls) in the same float operations, in the same order.

What a policy remembers is bounded in bytes (`FragMemoBudget`): the `_evaluate` results per node
version (`frag_simple.NodeVectors`), the fragmentation measure's memo, the interned memo keys
(`interning.IdTable`); the interned score keys are at most `_KEY_LIMIT` tuples of at most four
floats (`SCORE_KEY_BYTES` each).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import Final, cast

import numpy as np

from tessera.alloc.assign import Assignment, host_fit, one_gpu
from tessera.alloc.frag_batch import Raw, sigmoid_scores
from tessera.alloc.frag_simple import (
    FREE_CPU,
    FREE_MEMORY,
    FREE_TOTAL,
    GPU_COUNT,
    HOST_FITS,
    NO_PLACEMENT,
    SIMPLE,
    NodeVector,
    NodeVectors,
    SimpleBatch,
    host_fit_code,
    memo_key,
    memo_result_bytes,
    memos_of,
    stack,
)
from tessera.alloc.frag_settings import FragAwareSettings, FragMemoBudget
from tessera.alloc.fragmentation import FragmentationMeasure, GpuFree, HostDemand
from tessera.alloc.interning import IdTable
from tessera.alloc.model import MILLI_PER_GPU, ContainerRequest, FitFailure, NodeState, PodRequest
from tessera.alloc.model_pressure import ModelPressure
from tessera.alloc.policy import Evaluation, PlacementPolicy
from tessera.alloc.reference import AwareTerms, fgd_key, fragmentation_increase, host_increase, plain_measure
from tessera.alloc.reservation import Reservations
from tessera.alloc.workload import MixSnapshot


_Raw = Raw
_Placed = tuple[float, Assignment, int]  # a `Raw` that is not a failure
_INCREASE, _CHOICE = itemgetter(0), itemgetter(1)
# nodes to evaluate at once before the vectorised path pays for its numpy set-up (~0.2 ms): a
# whole-GPU pod's scalar evaluation of a node it has not seen is 100-200 us (the measure's memo
# misses), so at 1,213 nodes the 10-20 fresh fits of a new whole-GPU shape cost 2-3 ms one by one
_BATCH_MIN = 8
_KEY_LIMIT = 65_536  # interned memo keys and score keys per policy before a reset
SCORE_KEY_BYTES: Final = 260
"""Estimated bytes of one interned score key: a tuple of at most four floats and its slot in
`_keys` (key and value are the same tuple), so `_KEY_LIMIT` keys hold at most ~16 MiB.
Measured with tracemalloc: 208 bytes per key of four new floats in a full table."""


class _FragPolicyBase(ABC):
    name: PlacementPolicy
    cacheable = True
    standard_fit = True
    faithful: bool
    weighting: str = "pods"

    def __init__(self, snapshot: MixSnapshot, budget: FragMemoBudget = FragMemoBudget()) -> None:
        self.snapshot = snapshot
        self.budget = budget
        self._measure = self._new_measure(snapshot)
        self._host = HostDemand.of(snapshot)
        self._vectors = NodeVectors(budget.results)
        # Interned, so that the memos and caches (one entry per node and shape) hold shared
        # objects or ints: each new tracked object is one more for the cyclic collector to walk.
        self._memo_keys = IdTable(_KEY_LIMIT, budget.memo_keys)
        self._keys: dict[tuple[float, ...], tuple[float, ...]] = {}

    @property
    def epoch(self) -> int:
        return self._measure.epoch

    def estimated_bytes(self) -> dict[str, int]:
        """Per bounded memo, what it holds now by the estimate its budget is kept with."""
        return {
            "results": self._vectors.estimated_bytes,
            "measure": self._measure.estimated_bytes,
            "memo_keys": self._memo_keys.estimated_bytes,
            "score_keys": SCORE_KEY_BYTES * len(self._keys),
        }

    def _new_measure(self, snapshot: MixSnapshot) -> FragmentationMeasure:
        return FragmentationMeasure(snapshot, faithful=self.faithful, weighting=self.weighting, max_bytes=self.budget.measure)

    def use_mix(self, snapshot: MixSnapshot) -> None:
        """Switch to a new mix snapshot (no-op when it is the one in use)."""
        if snapshot.epoch != self._measure.epoch:
            self.snapshot = snapshot
            self._measure = self._new_measure(snapshot)
            self._host = HostDemand.of(snapshot)

    def node_changed(self, node: NodeState) -> None:
        """The cluster added or changed `node`: its vector is built now, while the node is warm in
        the CPU cache and no request waits (`EvaluationCache.prepare` says why)."""
        self._vectors.changed(node)

    def node_removed(self, name: str) -> None:
        self._vectors.removed(name)

    def evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        """`_finish` of `_evaluate`. The costly part, `_evaluate`, is memoised per node version on
        what it reads of the pod: GPU containers, models and class, and CPU/RAM only through
        `host_fit` and the measure's buckets. So pods that differ only in CPU or RAM (most of a
        trace's shapes) mostly share it; `_finish` (a few float operations) reads them exactly."""
        vector, key = self._memo(node, pod, self._pod_family(pod))
        result = vector.memo.get(key)
        if result is None:
            self._vectors.reserve(vector, memo_result_bytes(pod))
            result = vector.memo[key] = self._evaluate(node, pod)
            self._vectors.settle()
        return self._finish(node, pod, result)

    def _pod_family(self, pod: PodRequest) -> int:
        """An interned id of what `_evaluate` reads of the pod besides its CPU and RAM (GPU
        containers, models, class); once per pod, not per node."""
        shape = pod.shape
        return self._memo_keys.id_of((shape.gpus, shape.gpu_models, shape.app_class))

    def _memo(self, node: NodeState, pod: PodRequest, family: int) -> tuple[NodeVector, int]:
        """The node's vector, its memo of `_evaluate` results made current for this measure
        epoch (`NodeVector.memo`), and the pod's `memo_key` in it (`family`: `_pod_family`)."""
        vector = self._vectors.of(node)
        measure = self._measure
        if vector.memo_epoch != measure.epoch:
            self._vectors.renew(vector, measure.epoch)
        free_cpu, free_memory = vector.free_cpu, vector.free_host_memory
        cpu, memory = pod.cpu_milli, pod.memory_mib
        bucket = measure.bucket(free_cpu - cpu, free_memory - memory)
        return vector, memo_key(family, host_fit_code(free_cpu, free_memory, cpu, memory), bucket, measure.bucket_count)

    def memoised(self, node: NodeState, pod: PodRequest) -> Raw | None:
        """The `_evaluate` result held for (node, pod) under the current measure, if any."""
        vector, key = self._memo(node, pod, self._pod_family(pod))
        return vector.memo.get(key)

    def _evaluation(self, key: tuple[float, ...], choice: Assignment) -> Evaluation:
        shared = self._keys.get(key)
        if shared is None:
            if len(self._keys) >= _KEY_LIMIT:
                self._keys.clear()
            shared = self._keys[key] = key
        return Evaluation(shared, choice)

    def evaluate_many(self, nodes: Sequence[NodeState], pod: PodRequest) -> list[Evaluation | FitFailure]:
        """`[self.evaluate(node, pod) for node in nodes]`, equal result for result, with the
        nodes' vectors stacked into arrays once (`frag_simple`): the memo keys are computed
        together, every node on the simple path is measured in one vectorised pass, and the
        final terms of the fragmentation-aware score are computed together (`_finish_many`): a
        shape meeting hundreds of candidate nodes it has not been scored on."""
        if len(nodes) < _BATCH_MIN:
            return [self.evaluate(node, pod) for node in nodes]
        measure = self._measure
        vectors = self._vectors.current(nodes, measure.epoch)
        host, gpus = stack(vectors)
        cpu, memory = pod.cpu_milli, pod.memory_mib
        free_cpu, free_memory = host[:, FREE_CPU], host[:, FREE_MEMORY]
        host_fits = host_fit_code(free_cpu, free_memory, cpu, memory)
        buckets = measure.bucket_many(free_cpu - cpu, free_memory - memory)
        keys = memo_key(self._pod_family(pod), host_fits, buckets, measure.bucket_count).tolist()  # `_memo`'s, together
        memos = memos_of(vectors)
        raws: list[_Raw | None] = list(map(dict.get, memos, keys))
        missing = [i for i, raw in enumerate(raws) if raw is None]
        if missing:
            simple = np.zeros(len(nodes), dtype=bool)
            if self._simple_pod(pod):
                simple = (host_fits == HOST_FITS) & (host[:, SIMPLE] == 1)
                if not self.faithful:
                    simple &= host[:, NO_PLACEMENT] == 1
            batch: list[int] = []
            size = memo_result_bytes(pod)
            reserve = self._vectors.reserve
            for i in missing:
                reserve(vectors[i], size)
                if simple[i]:
                    batch.append(i)
                else:
                    raws[i] = memos[i][keys[i]] = self._evaluate(nodes[i], pod)
            if batch:
                SimpleBatch(measure, pod).run(batch, vectors, host, gpus, memos, keys, raws)
            self._vectors.settle()
        return self._finish_many(nodes, pod, raws, host)  # type: ignore[arg-type]

    def _finish_many(self, nodes: Sequence[NodeState], pod: PodRequest, raws: Sequence[_Raw], host: np.ndarray) -> list[Evaluation | FitFailure]:
        """`_finish` of every node (`host`: their `stack` host columns)."""
        return [self._finish(node, pod, raw) for node, raw in zip(nodes, raws)]

    def _simple_pod(self, pod: PodRequest) -> bool:
        return len(pod.gpu_containers) == 1 and pod.gpu_models is None and pod.app_class != "offline"

    def _simple_node(self, node: NodeState, vector: NodeVector) -> bool:
        # the share cap is enforced in assign(); placement labels rank GPUs their own way
        return (self.faithful or vector.no_placement) and not vector.offline and vector.uncapped

    def _vector(self, node: NodeState) -> NodeVector:
        """The node's healthy GPUs as the simple path reads them, cached by version."""
        return self._vectors.of(node)

    def _host_increase(self, node: NodeState, pod: PodRequest) -> float:
        """How much GPU compute placing `pod` leaves unfed by the node's CPU and RAM."""
        vector = self._vector(node)
        free, cpu, memory, unfed = vector.free_total, vector.free_cpu, vector.free_host_memory, self._host.unfed
        return unfed(free - pod.gpu_milli_total, cpu - pod.cpu_milli, memory - pod.memory_mib) - unfed(free, cpu, memory)

    def _evaluate(self, node: NodeState, pod: PodRequest) -> _Raw:
        """(fragmentation increase, assignment, idle GPUs left) or why the pod does not fit."""
        if (failure := host_fit(node, pod)) is not None:
            return failure
        containers = pod.gpu_containers
        vector = self._vector(node)
        simple = (
            len(containers) <= 1 and pod.gpu_models is None and pod.app_class != "offline" and self._simple_node(node, vector)
        )
        if simple:
            return self._evaluate_simple(node, pod, vector, containers[0] if containers else None)
        return self._evaluate_general(node, pod)

    def _evaluate_simple(
        self, node: NodeState, pod: PodRequest, vector: NodeVector, c: ContainerRequest | None
    ) -> tuple[float, Assignment, int] | FitFailure:
        """One container, no model or co-location preference: candidates are the distinct free
        values (GPUs in the same state are interchangeable; the lowest index wins)."""
        indices, free, idle, models = vector.indices, vector.free, vector.idle, vector.models
        measure = self._measure
        of = measure.of
        cpu_after = node.free_cpu_milli - pod.cpu_milli
        mem_after = node.free_memory_mib - pod.memory_mib
        if vector.before_epoch != measure.epoch:
            vector.before = of(models, node.free_cpu_milli, node.free_memory_mib, free)
            vector.before_epoch = measure.epoch
        before = vector.before
        idle_count = vector.idle_count
        if c is None:
            return of(models, cpu_after, mem_after, free) - before, (), idle_count
        if c.whole:
            positions = [k for k, is_idle in enumerate(idle) if is_idle][: c.gpu_count]
            if len(positions) < c.gpu_count:
                return FitFailure.GPU
            after = list(free)
            for k in positions:
                after[k] = (0, 0)
            increase = of(models, cpu_after, mem_after, after) - before
            return increase, (tuple(indices[k] for k in positions),), idle_count - c.gpu_count
        need_mem = c.gpu_memory_mib or 0
        milli = c.gpu_milli
        changes: list[tuple[int, GpuFree]] = [(k, (f - milli, m - need_mem)) for k, f, m in vector.distinct if f >= milli and m >= need_mem]
        if not changes:
            return FitFailure.GPU
        values = measure.of_variants(models, cpu_after, mem_after, free, changes)
        # the GPU of the lowest value rounded to 6 decimals (float noise must not split GPUs
        # in the same state), the lowest index on a tie; the increase from its exact value
        k, best, exact = changes[0][0], round(values[0], 6), values[0]
        for (position, _), raw in zip(changes[1:], values[1:]):
            value = round(raw, 6)
            if value < best:  # strict: the lowest index wins a tie
                k, best, exact = position, value, raw
        return exact - before, one_gpu(indices[k]), idle_count - (1 if idle[k] else 0)

    def _evaluate_general(self, node: NodeState, pod: PodRequest) -> Raw:
        return fragmentation_increase(node, pod, self._measure.of, self.faithful)

    def reference_increase(self, node: NodeState, pod: PodRequest) -> Raw:
        """`_evaluate` computed the plain way (`tessera.alloc.reference`): no memo, no vectors,
        no batch, the measure shape by shape over every GPU."""
        shapes = self._measure.shapes

        def measure_of(models: frozenset[str], free_cpu: int, free_memory: int, gpus: Sequence[GpuFree]) -> float:
            return plain_measure(shapes, models, free_cpu, free_memory, gpus)

        return fragmentation_increase(node, pod, measure_of, self.faithful)

    def reference_evaluate(self, node: NodeState, pod: PodRequest) -> Evaluation | FitFailure:
        raw = self.reference_increase(node, pod)
        if isinstance(raw, FitFailure):
            return raw
        return Evaluation(self._key(node, pod, raw, host_increase(node, pod, self._host)), raw[1])

    @abstractmethod
    def _key(self, node: NodeState, pod: PodRequest, placed: _Placed, host: float) -> tuple[float, ...]:
        """The policy's score key of a placement (`host`: `reference.host_increase`)."""

    def _finish(self, node: NodeState, pod: PodRequest, raw: _Raw) -> Evaluation | FitFailure:
        """The policy's evaluation from `_evaluate`'s result."""
        if isinstance(raw, FitFailure):
            return raw
        return self._evaluation(self._key(node, pod, raw, self._host_increase(node, pod)), raw[1])


class FgdPolicy(_FragPolicyBase):
    """FGD as published, for comparison runs and as the reference in benchmarks."""

    name = PlacementPolicy.FGD
    faithful = True

    def _host_increase(self, node: NodeState, pod: PodRequest) -> float:
        return 0.0  # FGD's score does not read it

    def _key(self, node: NodeState, pod: PodRequest, placed: _Placed, host: float) -> tuple[float, ...]:
        return fgd_key(placed[0])


class FragmentationAwarePolicy(_FragPolicyBase):
    """Tessera's default node policy (see module docstring)."""

    name = PlacementPolicy.FRAGMENTATION_AWARE
    faithful = False

    def __init__(self, snapshot: MixSnapshot, settings: FragAwareSettings | None = None, budget: FragMemoBudget = FragMemoBudget()) -> None:
        self.settings = settings or FragAwareSettings()
        self.weighting = "multi" if self.settings.multi_gpu_weighting else "pods"
        super().__init__(snapshot, budget)
        self._nodes: dict[str, NodeState] = {}
        self._reserve = self._reservations(snapshot)
        self._pressure = ModelPressure(snapshot, self.settings.model_protect_factor)
        self._terms = AwareTerms(self.settings, self._host, self._pressure, self._reserve)
        self._epoch_of: tuple[int, int, int] = (self._measure.epoch, self._reserve.generation, self._pressure.generation)
        self._epoch = 0

    @property
    def epoch(self) -> int:
        """Moves with the mix snapshot, whenever a reservation switches on or off, and when the
        GPUs per model change (model pressure)."""
        now = (self._measure.epoch, self._reserve.generation, self._pressure.generation)
        if now != self._epoch_of:
            self._epoch_of = now
            self._epoch += 1
        return self._epoch

    def use_mix(self, snapshot: MixSnapshot) -> None:
        if snapshot.epoch != self._measure.epoch:
            super().use_mix(snapshot)
            self._reserve = self._reservations(snapshot)
            self._pressure = ModelPressure(snapshot, self.settings.model_protect_factor)
            self._terms = AwareTerms(self.settings, self._host, self._pressure, self._reserve)
            for node in self._nodes.values():
                self._reserve.track(node)
                self._pressure.track(node)

    def _reservations(self, snapshot: MixSnapshot) -> Reservations:
        st = self.settings
        return Reservations(
            snapshot,
            st.reserve_horizon_pods,
            cpu_only=st.reserve_cpu_only,
            cpu_per_milli=self._host.cpu_per_milli,
            cpu_headroom=st.cpu_only_headroom,
            rare_need_cpu=st.rare_multi_need_cpu,
            scarce_share=st.scarce_share,
            scarce_prior=st.scarce_prior,
        )

    def node_changed(self, node: NodeState) -> None:
        """The cluster added or changed `node` (reservations count nodes cluster-wide)."""
        super().node_changed(node)
        self._nodes[node.name] = node
        self._reserve.track(node)
        self._pressure.track(node)

    def node_removed(self, name: str) -> None:
        super().node_removed(name)
        self._nodes.pop(name, None)
        self._reserve.forget(name)
        self._pressure.forget(name)

    def _finish_many(self, nodes: Sequence[NodeState], pod: PodRequest, raws: Sequence[_Raw], host: np.ndarray) -> list[Evaluation | FitFailure]:
        """`_finish` of every node, with what depends only on the pod decided once and the
        score terms computed over all nodes together, from the nodes' host columns where they
        hold the figure (`stack`); the same float operations in the same order as
        `_finish` (so the same bits)."""
        st = self.settings
        if not st.sigmoid_bands or st.prefer_in_use:
            return [self._finish(node, pod, raw) for node, raw in zip(nodes, raws)]
        placed = [i for i, raw in enumerate(raws) if raw.__class__ is not FitFailure]
        out: list[Evaluation | FitFailure] = list(raws)  # type: ignore[arg-type]  # the failures stay
        if not placed:
            return out
        n = len(placed)
        at = [nodes[i] for i in placed]
        found = cast(list[_Placed], [raws[i] for i in placed])
        choices = list(map(_CHOICE, found))
        # each term added in `_finish`'s order, element by element: the same float operations
        increases = np.fromiter(map(_INCREASE, found), dtype=np.float64, count=n)
        rows = host[placed]
        if st.host_weight:
            increases = increases + st.host_weight * self._host.unfed_increase_many(
                rows[:, FREE_TOTAL], rows[:, FREE_CPU], rows[:, FREE_MEMORY], pod.gpu_milli_total, pod.cpu_milli, pod.memory_mib
            )
        if st.model_weight and self._pressure:
            increases = increases + st.model_weight * np.array([self._terms.model_cost(node, pod, choice) for node, choice in zip(at, choices)], dtype=np.float64)
        if st.scarce_weight:
            increases = increases + st.scarce_weight * np.array(self._reserve.scarce_losses(at, pod, choices), dtype=np.float64)
        banded = sigmoid_scores(increases, st.band_scale)
        if self._reserve.active:
            banded = banded - (st.band_scale + 1) * np.array(self._reserve.penalties(at, pod, choices), dtype=np.float64) / MILLI_PER_GPU
        sizes = (-(st.node_size_preference * rows[:, GPU_COUNT]).astype(np.float64)).tolist()
        fewer_idle = [-float(idle) for _, _, idle in found] if st.prefer_fewer_idle else repeat(0.0)
        shared_keys = self._keys
        if len(shared_keys) + n > _KEY_LIMIT:
            shared_keys.clear()
        shared = shared_keys.setdefault
        # `_evaluation`, inline (its bound checked once above for the whole batch)
        evaluations = [Evaluation(shared(key, key), choice) for key, choice in zip(zip(banded.tolist(), sizes, repeat(0.0), fewer_idle), choices)]
        if n == len(raws):
            return evaluations  # type: ignore[return-value]
        for i, evaluation in zip(placed, evaluations):
            out[i] = evaluation
        return out

    def _host_increase(self, node: NodeState, pod: PodRequest) -> float:
        return super()._host_increase(node, pod) if self.settings.host_weight else 0.0

    def _key(self, node: NodeState, pod: PodRequest, placed: _Placed, host: float) -> tuple[float, ...]:
        return self._terms.key(node, pod, placed, host)
