"""Tessera's allocation model and placement policies (no I/O; numpy where nodes are scored in batches).

Public API (used by the scheduler extender `tessera.scheduler` and the simulator `tessera.sim`):

- `NodeState` / `GpuState`: a node's GPUs (index, uuid, model, memory MiB, health) and usage.
  `node_state_from_k8s(node)` builds one from the node's `tessera.dev/gpus` annotation.
- `PodRequest` / `ContainerRequest`: what a pod asks for. `pod_request_from_k8s(pod)` reads
  `tessera.dev/gpu-core` (1..99 = share of one GPU, N*100 = N whole GPUs), `tessera.dev/gpu-memory`
  (MiB per GPU) and the `tessera.dev/app-class` annotation; bad input raises `InvalidRequest`.
  Compute is counted in milli-GPUs internally (`MILLI_PER_GPU` = 1000, 1 % = 10 milli).
- `Cluster`: inventory + reservations + placement.
  - `add_node(node)` (also replaces an inventory, re-reserving its pods), `remove_node(name)`,
    `set_gpu_health(node, index, healthy)`, `set_tie_ranking(names)`;
  - `observe(pod)`: feed a newly seen pod into the learned workload mix (once per pod);
  - `check_fit(pod, node) -> FitFailure | None`, `fits`, `score(pod, node) -> float | None`
    (higher is better; `extender_scores({node: score})` maps a candidate set to 0..10),
    `evaluate` (both at once, cached per node version and pod shape: O(1) for unchanged nodes;
    most misfits rejected from a capacity summary without running the policy), `evaluate_many`
    (the same for a batch of nodes, per-pod work done once);
  - `place(pod, node) -> Placement | None` (GPU choice per container, nothing reserved),
    `schedule(pod, candidates=None)` (best node, ties to the tie ranking);
  - `reserve(pod, placement)`: re-checks against the current state and raises
    `ReserveConflict` instead of over-committing; idempotent for the same placement;
  - `release(uid)`, `allocated()`, `pod(uid)`, `placement(uid)`, `usage()`;
  - `evaluate_without(pod, node, evicted)`: `evaluate` as if those pods were gone (preemption);
  - `to_allocation(placement, assumed_at) -> contract.Allocation`, `restore(pod, allocation)`.
  Not thread-safe: callers serialise with a lock.
- `PlacementPolicy`: `fragmentation-aware` (default), `fgd`, `binpack`, `spread`, `bestfit`,
  `dotprod`, `random`. GPU-level binpack/spread inside a node follows the node label
  `tessera.dev/gpu-placement` when set. Online pods avoid GPUs with offline work; offline pods
  pack onto GPUs that already hold offline work.

Inside: `Cluster` calls the policies only through the `Policy` protocol (`policy`); the
fragmentation policies' plain reference scoring is `reference`, and the property tests hold
every fast path to it. The modules' layers are an import-linter contract (`alloc-layers`,
docs/architecture.md).

May import `tessera.model` only, the standard library and numpy otherwise (numpy in the batch
paths: `capacity_table`, `evaluation_cache`, `fragmentation`, `frag_batch`, `frag_policy`,
`frag_simple`): the extender, the simulator and the tests share it.
"""
from tessera.alloc.cluster import Cluster, Usage
from tessera.alloc.scores import extender_scores
from tessera.alloc.kube_objects import node_state_from_k8s, parse_quantity, pod_request_from_k8s
from tessera.alloc.model import (
    MILLI_PER_CORE,
    MILLI_PER_GPU,
    ContainerPlacement,
    ContainerRequest,
    FitFailure,
    GpuGrant,
    GpuState,
    InvalidRequest,
    NodeName,
    NodeState,
    Placement,
    PodRequest,
    PodUid,
    ReserveConflict,
)
from tessera.alloc.policy import DEFAULT_POLICY, Evaluation, PlacementPolicy
from tessera.alloc.workload import MixSettings, MixSnapshot, WorkloadMix, static_snapshot

__all__ = [
    "DEFAULT_POLICY",
    "MILLI_PER_CORE",
    "MILLI_PER_GPU",
    "Cluster",
    "ContainerPlacement",
    "ContainerRequest",
    "Evaluation",
    "FitFailure",
    "GpuGrant",
    "GpuState",
    "InvalidRequest",
    "MixSettings",
    "MixSnapshot",
    "NodeName",
    "NodeState",
    "Placement",
    "PlacementPolicy",
    "PodRequest",
    "PodUid",
    "ReserveConflict",
    "Usage",
    "WorkloadMix",
    "extender_scores",
    "node_state_from_k8s",
    "parse_quantity",
    "pod_request_from_k8s",
    "static_snapshot",
]
