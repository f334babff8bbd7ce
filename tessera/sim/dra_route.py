"""Node choice on a dra pool, two ways, each ending in kube-scheduler's DRA allocation (`tessera.sim.dra`).

`Route.DRA`, Tessera's design: the node is the one the pool's node policy picks (the production
`tessera.alloc.Cluster` scoring, default fragmentation-aware, ties to the seeded ranking: what the
extender would score from ResourceSlices and claims), and the devices inside it are what
kube-scheduler's allocator picks there, first fit in slice order. The policy scores the node for
its own GPU choice; the allocation may differ, and the bookkeeping follows the allocation. In a
real cluster the extender's `/dra/prioritize` scores nodes this way (`tessera.scheduler.dra_scores`).

`Route.DRA_DEFAULT`, the plain kube-scheduler (no extender), as modelled here:

- which nodes are tried: `numFeasibleNodesToFind` and the rotating `nextStartNodeIndex` of
  `pkg/scheduler/schedule_one.go` (below 100 nodes all of them; else the adaptive
  percentageOfNodesToScore, 50 - nodes/125 % with a floor of 5 % and of 100 nodes; filtering
  stops once that many feasible nodes are found and the next cycle starts after the last node
  checked). The node list order is the seeded tie ranking (the scheduler's node tree order is
  not something a trace gives);
- filter: NodeResourcesFit on CPU and memory, DynamicResources (the claim can be allocated on the
  node, `tessera.sim.dra.allocate`);
- score, with the default plugin weights of `pkg/scheduler/apis/config/v1/default_plugins.go`:
  NodeResourcesFit LeastAllocated (weight 1; CPU and memory weighted 1 each, `(allocatable -
  requested) * 100 / allocatable`, averaged with integer division) + NodeResourcesBalancedAllocation
  (weight 1; `(1 - std of the requested fractions) * 100`). The plugins with nothing to tell apart
  on a trace score every node alike and are left out: TaintToleration (3), NodeAffinity (2),
  PodTopologySpread (2), InterPodAffinity (2), ImageLocality (1), and DynamicResources, whose score
  (`computeScore`) only ranks prioritized-list alternatives, which Tessera's claims do not use.
  None of them looks at how full a node's GPUs are. Requested = the node's placed pods' CPU and
  memory plus this pod's (no non-zero defaults for pods that ask none);
- the highest total wins; equal totals go to the seeded tie ranking (kube-scheduler picks one at
  random among them, `selectHost`).

Nodes with a shares-per-GPU cap above 1 are refused (`ValueError`): DRA cannot express the cap.
"""
from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Final

from tessera.alloc import (
    MILLI_PER_CORE,
    Cluster,
    ContainerPlacement,
    ContainerRequest,
    GpuGrant,
    NodeState,
    Placement,
    PodRequest,
)
from tessera.model.contract import DRA_CAPACITY_MEMORY
from tessera.sim.dra import Device, DeviceResult, allocate, claim_request, grant_milli, node_devices

MIN_FEASIBLE_NODES: Final = 100  # schedule_one.go minFeasibleNodesToFind
MIN_FEASIBLE_PERCENT: Final = 5  # minFeasibleNodesPercentageToFind
DEFAULT_PERCENT: Final = 50  # DefaultPercentageOfNodesToScore, adaptive: 50 - nodes/125
MAX_NODE_SCORE: Final = 100


class Route(str, Enum):
    DEVICE_PLUGIN = "device-plugin"  # Tessera's extender and device plugin (the production Cluster alone)
    DRA = "dra"  # the pool's node policy, kube-scheduler's DRA allocation inside the node
    DRA_DEFAULT = "dra-default"  # kube-scheduler without extender: default scoring, DRA allocation


def feasible_nodes_to_find(nodes: int) -> int:
    """`numFeasibleNodesToFind` with percentageOfNodesToScore unset (adaptive)."""
    if nodes < MIN_FEASIBLE_NODES:
        return nodes
    percent = max(DEFAULT_PERCENT - nodes // 125, MIN_FEASIBLE_PERCENT)
    return max(nodes * percent // 100, MIN_FEASIBLE_NODES)


def _rounded(pod: PodRequest) -> PodRequest:
    """The pod as its claims consume compute: shares rounded up to whole cores (requestPolicy
    step 1), so the node policy scores what the allocation will take."""
    if all(c.gpu_milli % MILLI_PER_CORE == 0 for c in pod.containers):
        return pod
    containers = tuple(
        c if c.gpu_milli % MILLI_PER_CORE == 0 else ContainerRequest(c.name, c.gpu_count, c.gpu_core * MILLI_PER_CORE, c.gpu_memory_mib)
        for c in pod.containers
    )
    return PodRequest(pod.uid, containers, pod.cpu_milli, pod.memory_mib, pod.gpu_models, pod.app_class, pod.namespace, pod.name)


def _record(devices: list[Device], result: DeviceResult) -> None:
    """What one container's allocation leaves on the devices, for the pod's next container."""
    for device in devices:
        if device.index == result.index:
            device.in_use = True
            for name, value in result.consumed.items():
                device.consumed[name] = device.consumed.get(name, 0) + value


def allocate_pod(node: NodeState, pod: PodRequest, consumable_capacity: bool = True, score: float = 0.0) -> Placement | None:
    """Each GPU container's claim allocated on `node` as kube-scheduler would; the placement
    carries what the allocation consumes (cores as milli-GPUs, memory MiB; whole devices take
    the GPU's memory as `Cluster` counts it). None when some claim cannot be allocated."""
    devices = node_devices(node, consumable_capacity)
    memory = {g.index: g.memory_mib for g in node.gpus}
    containers = []
    for c in pod.gpu_containers:
        results = allocate(devices, claim_request(c, pod.gpu_models))
        if results is None:
            return None
        for r in results:
            _record(devices, r)
        grants = tuple(
            GpuGrant(r.index, grant_milli(r), r.consumed.get(DRA_CAPACITY_MEMORY, 0 if r.consumed else memory[r.index]))
            for r in results
        )
        containers.append(ContainerPlacement(c.name, grants))
    return Placement(node.name, tuple(containers), score)


def _host_fits(node: NodeState, pod: PodRequest) -> bool:
    return node.free_cpu_milli >= pod.cpu_milli and node.free_memory_mib >= pod.memory_mib


def _least_allocated(requested: int, allocatable: int) -> int:
    if allocatable <= 0 or requested > allocatable:
        return 0
    return (allocatable - requested) * MAX_NODE_SCORE // allocatable


def default_score(node: NodeState, pod: PodRequest) -> int:
    """NodeResourcesFit (LeastAllocated) + NodeResourcesBalancedAllocation on CPU and memory."""
    if node.cpu_milli is None or node.memory_mib is None:
        return 0
    cpu = node.used_cpu_milli + pod.cpu_milli
    mem = node.used_memory_mib + pod.memory_mib
    least = (_least_allocated(cpu, node.cpu_milli) + _least_allocated(mem, node.memory_mib)) // 2
    fractions = [min(cpu / node.cpu_milli, 1.0) if node.cpu_milli else 1.0, min(mem / node.memory_mib, 1.0) if node.memory_mib else 1.0]
    std = abs(fractions[0] - fractions[1]) / 2
    balanced = int((1 - std) * MAX_NODE_SCORE)
    return least + balanced


class DraPlacer:
    """Places pods of a dra pool for the replay; `Cluster.reserve` records the result."""

    def __init__(self, cluster: Cluster, route: Route, node_order: Sequence[str], consumable_capacity: bool = True) -> None:
        if route is Route.DEVICE_PLUGIN:
            raise ValueError("the device-plugin route is the Cluster's own schedule()")
        capped = sorted(n.name for n in cluster.nodes.values() if (n.max_shares_per_gpu or 1) > 1)
        if capped:
            # DRA has no count of claims per device: kube-scheduler would go past the cap, which
            # the Cluster's bookkeeping refuses. Not modelled rather than modelled wrongly.
            raise ValueError(f"a shares-per-GPU cap above 1 cannot be expressed on a dra pool (nodes {', '.join(capped[:3])})")
        self.cluster = cluster
        self.route = route
        self.consumable_capacity = consumable_capacity
        self._order = list(node_order)
        self._rank = {name: i for i, name in enumerate(self._order)}
        self._next_start = 0
        # (node version, pod shape) -> the claims can be allocated there; versions change on every reserve
        self._feasible: dict[str, tuple[int, dict[tuple[object, ...], bool]]] = {}
        self.fallbacks = 0  # policy's node refused by the allocator: chosen again among allocatable nodes

    def allocatable(self, node: NodeState, pod: PodRequest) -> bool:
        version, by_shape = self._feasible.get(node.name, (-1, {}))
        if version != node.version:
            by_shape = {}
            self._feasible[node.name] = (node.version, by_shape)
        found = by_shape.get(pod.shape)
        if found is None:
            found = allocate_pod(node, pod, self.consumable_capacity) is not None
            by_shape[pod.shape] = found
        return found

    def place(self, pod: PodRequest) -> Placement | None:
        if self.route is Route.DRA:
            return self._place_with_policy(pod)
        return self._place_default(pod)

    def _place_with_policy(self, pod: PodRequest) -> Placement | None:
        scored = _rounded(pod)
        chosen = self.cluster.schedule(scored)
        if chosen is None:
            return None
        node = self.cluster.nodes[chosen.node]
        placed = allocate_pod(node, pod, self.consumable_capacity, chosen.score)
        if placed is not None:
            return placed
        # The policy's fit is looser than the allocator's (a claim without memory takes all of
        # it; a pool of one claim per GPU): pick again among the nodes the allocator accepts.
        self.fallbacks += 1
        nodes = self.cluster.nodes
        candidates = [n for n in self._order if _host_fits(nodes[n], pod) and self.allocatable(nodes[n], pod)]
        chosen = self.cluster.schedule(scored, candidates=candidates)
        if chosen is None:
            return None
        return allocate_pod(nodes[chosen.node], pod, self.consumable_capacity, chosen.score)

    def _place_default(self, pod: PodRequest) -> Placement | None:
        nodes = self.cluster.nodes
        order = self._order
        total = len(order)
        if not total:
            return None
        wanted = feasible_nodes_to_find(total)
        best: tuple[int, int] | None = None
        best_name = ""
        found = checked = 0
        start = self._next_start
        while checked < total and found < wanted:
            name = order[(start + checked) % total]
            checked += 1
            node = nodes[name]
            if not _host_fits(node, pod) or not self.allocatable(node, pod):
                continue
            found += 1
            key = (default_score(node, pod), -self._rank[name])
            if best is None or key > best:
                best, best_name = key, name
        self._next_start = (start + checked) % total
        if best is None:
            return None
        return allocate_pod(nodes[best_name], pod, self.consumable_capacity, float(best[0]))
