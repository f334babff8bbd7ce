"""The fragmentation policies' simple path over many nodes at once: one pod meeting hundreds of
candidate nodes it has not been scored on (a new share at 5,000 nodes and more).

What the path reads of a node is derived once per node version (`NodeVector`), including one
int64 array (`NodeVector.packed`) that holds the node's host figures and its usable GPUs. A
batch stacks those arrays in C (`stack`) and works on columns from then on: the memo keys, which
nodes take the simple path, the candidate GPUs of a share, their measure (`frag_batch`), the
choice and the score terms. Python touches each node a few times, in C-level `map`s where it can:
at 5,000 nodes a node's objects are cold in the CPU cache, and each attribute read of each node
in a Python loop is a measurable part of the tail (docs/benchmarks.md).

Exact: every result equals the scalar path's and the plain reference's (`tessera.alloc.reference`),
bit for bit (tests/tessera/alloc/test_frag_batch.py, test_reference_equivalence.py). Both paths
stay because each is the fast one where it runs (`frag_policy` says where).

Also here, `NodeVectors`: the policy's vector of each node and the byte bound of what their memos
hold together.
"""
from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Final, TypeVar

import numpy as np

from tessera.alloc.assign import one_gpu
from tessera.alloc.frag_batch import Raw, VectorBatch, demand_counts, first_minimum, fits_each, shape_sum
from tessera.alloc.fragmentation import FragmentationMeasure, GpuFree
from tessera.alloc.model import FitFailure, NodeState, PodRequest

# NodeVector.packed: these host columns, then these rows of one value per usable GPU
USABLE, FREE_CPU, FREE_MEMORY, IDLE_COUNT, FREE_TOTAL, GPU_COUNT, SIMPLE, NO_PLACEMENT = range(8)
HOST_COLUMNS = 8
FREE, GPU_MEMORY, FIRST, INDEX, IDLE = range(5)
GPU_ROWS = 5
HOST_FITS: Final = 3
"""`host_fit_code` of a pod whose CPU and RAM both fit the node."""
_IntOrArray = TypeVar("_IntOrArray", int, np.ndarray)


def host_fit_code(free_cpu: _IntOrArray, free_memory: _IntOrArray, cpu: int, memory: int) -> _IntOrArray:
    """Whether the pod's CPU (2) and its RAM (1) fit the node's free figures, added into one
    small int (`HOST_FITS`: both); element-wise on arrays of free figures."""
    return (free_cpu >= cpu) * 2 + (free_memory >= memory)  # type: ignore[return-value]  # int or array, as given


def memo_key(family: int, host_fits: _IntOrArray, bucket: _IntOrArray, bucket_count: int) -> _IntOrArray:
    """The key of an `_evaluate` result in a node's memo (`NodeVector.memo`): the pod's family
    (`_FragPolicyBase._pod_family`), its `host_fit_code` on the node and the measure's bucket of
    the CPU and RAM it leaves there (`FragmentationMeasure.bucket`, one of `bucket_count`).

    Packed into one int, mixed radix, because the memo is looked up once per candidate node and
    an int hashes with nothing to build or for the collector to walk; element-wise on arrays (a
    batch computes every node's key at once). A memo holds the results of one measure epoch,
    which fixes `bucket_count`, so keys of one memo never collide."""
    return (family * 4 + host_fits) * bucket_count + bucket  # type: ignore[return-value]  # int or array, as given


MEMO_LIMIT: Final = 1024  # results per node version (pod families x CPU/RAM buckets)

MEMO_RESULT_BYTES: Final = 350
"""Estimated bytes of one memoised result of a share or a pod without GPUs: the memo's slot and
int key, the (increase, assignment, idle GPUs) tuple and its float; their assignment is a shared
constant (`assign.one_gpu`, for GPU indices under 64: a node of more GPUs is outside this
estimate by ~120 bytes per result of a share on its GPUs from the 65th on). Measured with tracemalloc over 100 and 1,000 loaded 8-GPU nodes:
338 and 307 bytes per result where each memo holds one (its first costs the dict's table, and
the policy's first evaluation of a node its other figures), 123-155 where they hold 10 to 50."""
ASSIGNMENT_BYTES: Final = 50
ASSIGNMENT_GPU_BYTES: Final = 8
"""What any other pod's result holds besides (`memo_result_bytes`): a tuple per GPU container
and one around them, `ASSIGNMENT_BYTES` each, and `ASSIGNMENT_GPU_BYTES` per GPU index.
Measured: 402 bytes per result of a one-GPU whole pod, one result per memo (458 estimated)."""


def memo_result_bytes(pod: PodRequest) -> int:
    """The estimate of one memoised result for `pod` (`MEMO_RESULT_BYTES`, `ASSIGNMENT_BYTES`)."""
    containers = pod.gpu_containers
    if not containers or (len(containers) == 1 and not containers[0].whole):
        return MEMO_RESULT_BYTES
    return MEMO_RESULT_BYTES + ASSIGNMENT_BYTES * (len(containers) + 1) + ASSIGNMENT_GPU_BYTES * sum(c.gpu_count for c in containers)


class NodeVector:
    """What the simple path reads of one version of a node, computed once per version."""

    __slots__ = (
        "version", "indices", "free", "free_milli", "free_memory", "free_total", "idle", "models", "idle_count", "offline",
        "before_epoch", "before", "distinct", "no_placement", "uncapped", "free_cpu", "free_host_memory", "memo", "memo_epoch", "first",
        "packed", "memo_bytes",
    )

    def __init__(self, node: NodeState) -> None:
        healthy = [g for g in node.gpus if g.healthy]
        self.version = node.version
        self.free_cpu = node.free_cpu_milli
        self.free_host_memory = node.free_memory_mib
        # the policy's memo of `_evaluate` results for this version (`_FragPolicyBase._memo`),
        # valid under the measure epoch `memo_epoch`
        self.memo: dict[int, Raw] = {}
        self.memo_epoch = -1
        self.memo_bytes = 0  # the estimate of `memo` (`NodeVectors`)
        self.indices = [g.index for g in healthy]
        self.free: list[GpuFree] = [(g.free_milli, g.free_memory_mib) for g in healthy]
        self.free_milli = [f for f, _ in self.free]
        self.free_memory = [m for _, m in self.free]
        self.free_total = sum(self.free_milli)
        self.idle = [g.idle for g in healthy]
        self.models = node.models
        self.idle_count = sum(self.idle)
        self.offline = any(g.offline_milli for g in node.gpus)
        # read from the labels once per version (a label change makes a new version)
        self.no_placement = node.gpu_placement is None
        self.uncapped = node.max_shares_per_gpu is None
        self.before_epoch = -1  # the measure epoch `before` was computed under; -1: not yet
        self.before = 0.0  # the node's fragmentation as it is
        # (position, free milli, free memory) of the first GPU of each distinct free value: the
        # candidates for a share (GPUs in the same state are interchangeable; the lowest index wins)
        seen: set[GpuFree] = set()
        self.distinct: list[tuple[int, int, int]] = []
        self.first: list[bool] = []  # per position: the first GPU of its free value
        for k, (f, m) in enumerate(self.free):
            self.first.append((f, m) not in seen)
            if (f, m) not in seen:
                seen.add((f, m))
                self.distinct.append((k, f, m))
        # the host columns, then the GPU rows (module constants); made here, at the node's
        # change, so that a batch stacks hundreds of nodes in C (`stack`)
        host = [
            len(self.free_milli), self.free_cpu, self.free_host_memory, self.idle_count, self.free_total, len(node.gpus),
            not self.offline and self.uncapped, self.no_placement,
        ]
        self.packed = np.array([*host, *self.free_milli, *self.free_memory, *self.first, *self.indices, *self.idle], dtype=np.int64)


_NAME, _VERSION, _MEMO_EPOCH, _MEMO, _PACKED = (attrgetter(a) for a in ("name", "version", "memo_epoch", "memo", "packed"))
_MODELS, _BEFORE, _BEFORE_EPOCH = attrgetter("models"), attrgetter("before"), attrgetter("before_epoch")


class NodeVectors:
    """The policy's `NodeVector` of each node, for its current version, and the estimate of what
    their memos hold together (`memo_result_bytes` per result, kept as results are added): past
    `max_bytes` every node's memo is emptied, since the budget is for all nodes together and
    which node's results will be asked for again is not known. A memo is emptied too at
    `MEMO_LIMIT` results, when the measure's epoch moves, and goes with its node's version."""

    __slots__ = ("_by_name", "_bytes", "_max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self._by_name: dict[str, NodeVector] = {}
        self._bytes = 0
        self._max_bytes = max_bytes

    @property
    def estimated_bytes(self) -> int:
        """What every memo holds now, by the estimate the budget is kept with."""
        return self._bytes

    def changed(self, node: NodeState) -> NodeVector:
        """A new vector for the node's version (its old one's memo goes with it)."""
        old = self._by_name.get(node.name)
        if old is not None:
            self._bytes -= old.memo_bytes
        vector = self._by_name[node.name] = NodeVector(node)
        return vector

    def removed(self, name: str) -> None:
        old = self._by_name.pop(name, None)
        if old is not None:
            self._bytes -= old.memo_bytes

    def of(self, node: NodeState) -> NodeVector:
        """The node's vector for its current version (made where missing or stale)."""
        vector = self._by_name.get(node.name)
        if vector is None or vector.version != node.version:
            vector = self.changed(node)
        return vector

    def current(self, nodes: Sequence[NodeState], epoch: int) -> list[NodeVector]:
        """Each node's vector for its current version (made where missing or stale), its memo
        made current for the measure `epoch` (emptied when the epoch moved)."""
        vectors = list(map(self._by_name.get, map(_NAME, nodes)))
        try:
            current = list(map(_VERSION, vectors)) == list(map(_VERSION, nodes))
        except AttributeError:  # a node without a vector
            current = False
        if not current:
            for i, (node, vector) in enumerate(zip(nodes, vectors)):
                if vector is None or vector.version != node.version:
                    vectors[i] = self.changed(node)
        found: list[NodeVector] = vectors  # type: ignore[assignment]  # none is None now
        if list(map(_MEMO_EPOCH, found)).count(epoch) != len(found):
            for vector in found:
                if vector.memo_epoch != epoch:
                    self.renew(vector, epoch)
        return found

    def renew(self, vector: NodeVector, epoch: int) -> None:
        """The measure's epoch moved: the vector's memo starts again empty under `epoch`."""
        self._bytes -= vector.memo_bytes
        vector.memo = {}
        vector.memo_bytes = 0
        vector.memo_epoch = epoch

    def reserve(self, vector: NodeVector, size: int) -> None:
        """Count a result of `size` bytes about to be put into the vector's memo (emptied first
        when it holds `MEMO_LIMIT`); `settle` once the results are in."""
        memo = vector.memo
        if len(memo) >= MEMO_LIMIT:
            memo.clear()  # in place: a batch holds the memos it fills (`memos_of`)
            self._bytes -= vector.memo_bytes
            vector.memo_bytes = 0
        vector.memo_bytes += size
        self._bytes += size

    def settle(self) -> None:
        """Past the budget, every memo is emptied."""
        if self._bytes > self._max_bytes:
            for vector in self._by_name.values():
                if vector.memo_bytes:
                    vector.memo = {}
                    vector.memo_bytes = 0
            self._bytes = 0


def memos_of(vectors: Sequence[NodeVector]) -> list[dict[int, Raw]]:
    return list(map(_MEMO, vectors))


def stack(vectors: Sequence[NodeVector]) -> tuple[np.ndarray, np.ndarray]:
    """The vectors' `packed` arrays as (nodes x `HOST_COLUMNS`) host columns and a (nodes x
    `GPU_ROWS` x GPUs) int64 array of GPU rows, short nodes padded with 0."""
    packed = list(map(_PACKED, vectors))
    n = len(packed)
    flat = np.concatenate(packed) if n else np.zeros(0, dtype=np.int64)
    sizes = np.fromiter(map(len, packed), dtype=np.int64, count=n)
    lengths = (sizes - HOST_COLUMNS) // GPU_ROWS
    width = max(1, int(lengths.max())) if n else 1
    if n and int(lengths.min()) == width:
        table = flat.reshape(n, HOST_COLUMNS + GPU_ROWS * width)
        return table[:, :HOST_COLUMNS], table[:, HOST_COLUMNS:].reshape(n, GPU_ROWS, width)
    starts = np.cumsum(sizes) - sizes
    host = flat[starts[:, None] + np.arange(HOST_COLUMNS)].reshape(n, HOST_COLUMNS)
    out = np.zeros((n, GPU_ROWS, width), dtype=np.int64)
    gpu_sizes = sizes - HOST_COLUMNS
    at = np.arange(int(gpu_sizes.sum())) - np.repeat(np.cumsum(gpu_sizes) - gpu_sizes, gpu_sizes)
    gpus = np.maximum(np.repeat(lengths, gpu_sizes), 1)
    values = flat[np.repeat(starts + HOST_COLUMNS, gpu_sizes) + at]
    out[np.repeat(np.arange(n), gpu_sizes), at // gpus, at % gpus] = values
    return host, out


class SimpleBatch:
    """The simple path (`_evaluate_simple`: one container, no model or co-location preference)
    for many nodes and one pod, picking each node's GPU exactly as the scalar path does (lowest
    index among equal rounded values).

    A share pod (the tail: a new share meets hundreds of nodes) is done in arrays end to end:
    the candidate GPUs of every node (the first GPU of each distinct free value with the share
    free) are found, changed, measured and chosen in numpy. A whole-GPU pod (it fits few nodes
    at load) goes item by item through a `VectorBatch`."""

    def __init__(self, measure: FragmentationMeasure, pod: PodRequest) -> None:
        self._measure = measure
        self._pod = pod
        self._container = pod.gpu_containers[0]

    def run(
        self, rows: list[int], vectors: Sequence[NodeVector], host: np.ndarray, gpus: np.ndarray,
        memos: Sequence[dict[int, Raw]], keys: Sequence[int], results: list[Raw | None],
    ) -> None:
        """The result of the nodes at `rows` (of `vectors` and of `stack`'s `host` and `gpus`;
        each passed `host_fit`): into `results[row]` and `memos[row][keys[row]]`."""
        raws = self._whole(rows, vectors) if self._container.whole else self._shares(rows, vectors, host[rows], gpus[rows])
        for row, raw in zip(rows, raws):
            results[row] = memos[row][keys[row]] = raw

    def _whole(self, rows: list[int], vectors: Sequence[NodeVector]) -> list[Raw]:
        measure, pod, count = self._measure, self._pod, self._container.gpu_count
        batch = VectorBatch()
        # per node: (vector, item of `before` or -1, the item, the GPUs it takes), or None: no room
        pending: list[tuple[NodeVector, int, int, tuple[int, ...]] | None] = []
        for row in rows:
            vector = vectors[row]
            positions = [k for k, is_idle in enumerate(vector.idle) if is_idle][:count]
            if len(positions) < count:
                pending.append(None)
                continue
            base = batch.base(vector.free_milli, vector.free_memory)
            item = batch.item(base, vector.models, vector.free_cpu - pod.cpu_milli, vector.free_host_memory - pod.memory_mib, [(k, (0, 0)) for k in positions])
            before = batch.item(base, vector.models, vector.free_cpu, vector.free_host_memory) if vector.before_epoch != measure.epoch else -1
            pending.append((vector, before, item, tuple(vector.indices[k] for k in positions)))
        values = batch.values(measure) if len(batch) else []
        out: list[Raw] = []
        for entry in pending:
            if entry is None:
                out.append(FitFailure.GPU)
                continue
            vector, before_item, item, taken = entry
            if before_item >= 0:
                vector.before = values[before_item]
                vector.before_epoch = measure.epoch
            out.append((values[item] - vector.before, (taken,), vector.idle_count - count))
        return out

    def _shares(self, rows: list[int], all_vectors: Sequence[NodeVector], host: np.ndarray, gpus: np.ndarray) -> list[Raw]:
        measure, pod, c = self._measure, self._pod, self._container
        vectors = [all_vectors[row] for row in rows]
        n = len(vectors)
        lengths, cpu, ram, idle_count = host[:, USABLE], host[:, FREE_CPU], host[:, FREE_MEMORY], host[:, IDLE_COUNT]
        free, gpu_memory, first, gpu_index, idle = gpus[:, FREE], gpus[:, GPU_MEMORY], gpus[:, FIRST], gpus[:, INDEX], gpus[:, IDLE]
        width = gpus.shape[2]
        node_models = list(map(_MODELS, vectors))
        model_index = {models: i for i, models in enumerate(dict.fromkeys(node_models))}
        model_ids = np.fromiter(map(model_index.__getitem__, node_models), dtype=np.intp, count=n)
        valid = np.arange(width) < lengths[:, None]
        need_memory = c.gpu_memory_mib or 0
        items_at, positions = np.nonzero(first.astype(bool) & valid & (free >= c.gpu_milli) & (gpu_memory >= need_memory))
        items = len(items_at)
        # the per-demand counts of each node as it is, then of each item (the node with the
        # share on one GPU) by adjusting them for that GPU alone: integers, so exact in any order
        fitting, fitting_free, idle_milli = demand_counts(measure, free, gpu_memory, valid)
        old_free, old_memory = free[items_at, positions], gpu_memory[items_at, positions]
        new_free, new_memory = old_free - c.gpu_milli, old_memory - need_memory
        fit_old, fit_new = fits_each(measure, old_free, old_memory), fits_each(measure, new_free, new_memory)
        item_fitting = fitting[:, items_at] - fit_old + fit_new
        item_fitting_free = fitting_free[:, items_at] - np.where(fit_old, old_free, 0) + np.where(fit_new, new_free, 0)
        item_idle = idle_milli[items_at] - c.gpu_milli
        # the nodes whose fragmentation before is not known under this epoch, measured alongside
        epoch = measure.epoch
        before = np.fromiter(map(_BEFORE, vectors), dtype=np.float64, count=n)
        unknown = np.flatnonzero(np.fromiter(map(_BEFORE_EPOCH, vectors), dtype=np.int64, count=n) != epoch)
        take = np.concatenate([items_at, unknown])
        all_fitting = np.concatenate([item_fitting, fitting[:, unknown]], axis=1)
        all_idle = np.concatenate([item_idle, idle_milli[unknown]])
        all_stranded = all_idle - np.concatenate([item_fitting_free, fitting_free[:, unknown]], axis=1)
        values = shape_sum(
            measure, all_fitting, all_stranded, all_idle,
            np.concatenate([cpu[items_at] - pod.cpu_milli, cpu[unknown]]), np.concatenate([ram[items_at] - pod.memory_mib, ram[unknown]]),
            model_ids[take], list(model_index),
        ) if len(take) else np.zeros(0)
        if len(unknown):
            before[unknown] = values[items:]
            for i, value in zip(unknown.tolist(), values[items:].tolist()):
                vectors[i].before = value
                vectors[i].before_epoch = epoch
        # per node with a candidate GPU: its first GPU of the lowest rounded value, and the
        # scalar path's result from its exact value (`value - before`, the one float subtraction
        # the scalar path does)
        picked, k, _ = first_minimum(items_at, positions, values[:items], n, width)
        exact = np.zeros((n, width))
        exact[items_at, positions] = values[:items]
        placed = list(zip((exact[picked, k] - before[picked]).tolist(), map(one_gpu, gpu_index[picked, k].tolist()), (idle_count[picked] - idle[picked, k]).tolist()))
        if len(placed) == n:
            return placed  # type: ignore[return-value]
        out: list[Raw] = [FitFailure.GPU] * n
        for row, found in zip(picked.tolist(), placed):
            out[row] = found
        return out
