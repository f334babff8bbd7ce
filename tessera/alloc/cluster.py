"""`Cluster`: the GPU inventory, who holds what, and the policy-driven placement around it.

The same object serves the scheduler extender (filter / score one node at a time, `place` +
`reserve` at bind, `release` on pod deletion, `restore` from allocation records after a restart)
and the simulator (`schedule` = filter + score over every node, then `reserve`). It is not
thread-safe: the extender serialises calls with its lock.

Scores are cached per (node, pod shape, policy) and keyed on the node's `version` and the
policy's `epoch`, so a scheduling cycle over 1213 nodes costs dict look-ups for every node whose
state did not change since a pod of the same shape was last scored (`evaluation_cache`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tessera.alloc.assign import host_fit, usable
from tessera.alloc.evaluation_cache import EvaluationCache
from tessera.alloc.eviction import EvictionTrial, SetAside
from tessera.alloc.frag_policy import FgdPolicy, FragmentationAwarePolicy
from tessera.alloc.model import (
    MILLI_PER_CORE,
    MILLI_PER_GPU,
    ContainerPlacement,
    FitFailure,
    GpuGrant,
    NodeState,
    Placement,
    PodRequest,
    PodUid,
    ReserveConflict,
)
from tessera.alloc.policy import (
    DEFAULT_POLICY,
    BestFitPolicy,
    BinpackPolicy,
    DotProductPolicy,
    Evaluation,
    PlacementPolicy,
    Policy,
    RandomPolicy,
    SpreadPolicy,
)
from tessera.alloc.ranking import BestNodeIndex
from tessera.alloc.workload import MixSnapshot, WorkloadMix
from tessera.model.contract import Allocation, GpuShare


@dataclass(frozen=True)
class Usage:
    """GPU totals over healthy GPUs, in milli-GPUs."""

    capacity_milli: int
    allocated_milli: int
    gpus: int


class Cluster:
    def __init__(
        self,
        nodes: Iterable[NodeState] = (),
        *,
        policy: PlacementPolicy = DEFAULT_POLICY,
        mix: WorkloadMix | None = None,
        fixed_mix: MixSnapshot | None = None,
        seed: int = 0,
    ) -> None:
        """`policy`: default node policy. `mix`: the live workload-mix estimator fed by `observe`.
        `fixed_mix`: a known mix (the paper gives FGD the whole trace's mix) used instead of `mix`
        by the FGD policy only. `seed`: for the random baseline."""
        self.nodes: dict[str, NodeState] = {}
        self.default_policy = policy
        self.mix = mix if mix is not None else WorkloadMix()
        self._fixed_mix = fixed_mix
        self._seed = seed
        self._policies: dict[PlacementPolicy, Policy] = {}
        self._pods: dict[PodUid, tuple[PodRequest, Placement]] = {}
        self._evaluations = EvaluationCache()
        self._rank: dict[str, int] = {}
        self._index = BestNodeIndex()
        self._versions = 0  # node versions are unique across nodes and time (stale-entry checks)
        for node in nodes:
            self.add_node(node)

    # --- policies -------------------------------------------------------------------------------
    def policy(self, name: PlacementPolicy | None = None) -> Policy:
        name = name or self.default_policy
        found = self._policies.get(name)
        if found is None:
            found = self._make_policy(name)
            self._policies[name] = found
            self._introduce(found)
        return found

    def install_policy(self, impl: Policy) -> None:
        """Use this policy object for its name (tuned settings, benchmarks, ablations)."""
        self._policies[impl.name] = impl
        self._introduce(impl)
        self._index = BestNodeIndex()
        self._evaluations.clear()  # results of the object it replaces must not be served

    def _introduce(self, impl: Policy) -> None:
        """The policy learns the inventory it will score (one that looks across nodes, for
        reservations, needs all of it)."""
        for node in self.nodes.values():
            impl.node_changed(node)

    def _make_policy(self, name: PlacementPolicy) -> Policy:
        if name is PlacementPolicy.FGD:
            return FgdPolicy(self._fixed_mix or self.mix.snapshot())
        if name is PlacementPolicy.FRAGMENTATION_AWARE:
            return FragmentationAwarePolicy(self.mix.snapshot())
        simple: dict[PlacementPolicy, Policy] = {
            PlacementPolicy.BINPACK: BinpackPolicy(),
            PlacementPolicy.SPREAD: SpreadPolicy(),
            PlacementPolicy.BESTFIT: BestFitPolicy(),
            PlacementPolicy.DOTPROD: DotProductPolicy(),
            PlacementPolicy.RANDOM: RandomPolicy(self._seed),
        }
        return simple[name]

    def observe(self, pod: PodRequest) -> None:
        """Feed one arriving pod into the workload-mix estimate (call once per new pod)."""
        self.mix.observe(pod)
        snapshot = self.mix.snapshot()
        for name, policy in self._policies.items():
            if name is PlacementPolicy.FGD and self._fixed_mix is not None:
                continue  # FGD keeps the mix it was given (the paper gives it the whole trace's)
            policy.use_mix(snapshot)

    # --- inventory ------------------------------------------------------------------------------
    def add_node(self, node: NodeState) -> list[PodUid]:
        """Add a node, or replace its inventory keeping the pods placed on it. A pod that no longer
        fits stays counted, past 100 % of its GPUs if need be (it may be running: forgetting it
        would let another pod onto its GPU; `overcommitted` tells). Returns the pods that hold a
        GPU the new inventory lacks: those cannot be counted and are released."""
        old = self.nodes.get(node.name)
        self.nodes[node.name] = node
        self._rank.setdefault(node.name, len(self._rank))
        self._evaluations.forget(node.name)
        self._changed(node)
        dropped: list[PodUid] = []
        if old is not None:
            for uid, (pod, placement) in list(self._pods.items()):
                if placement.node != node.name:
                    continue
                del self._pods[uid]
                try:
                    self._reserve(pod, placement, share_cap=False, force=True)
                except ReserveConflict:
                    dropped.append(uid)
        return dropped

    def remove_node(self, name: str) -> list[PodUid]:
        """Forget a node; returns the pods that were placed on it (their records are dropped)."""
        self.nodes.pop(name, None)
        self._evaluations.forget(name)
        self._index.touched(name)
        for impl in self._policies.values():
            impl.node_removed(name)
        gone = [uid for uid, (_, p) in self._pods.items() if p.node == name]
        for uid in gone:
            del self._pods[uid]
        return gone

    def set_gpu_health(self, node_name: str, index: int, healthy: bool) -> None:
        """Mark a GPU (un)healthy; an unhealthy GPU takes no new work, running pods stay recorded."""
        node = self.nodes[node_name]
        for g in node.gpus:
            if g.index == index:
                g.healthy = healthy
                self._changed(node)
                return
        raise KeyError(f"node {node_name} has no GPU {index}")

    def set_tie_ranking(self, order: Iterable[str]) -> None:
        """Equal scores go to the node earliest in `order` (the paper's seeded random ranking)."""
        self._rank = {name: i for i, name in enumerate(order)}
        for name in self.nodes:
            self._rank.setdefault(name, len(self._rank))
        self._index = BestNodeIndex()

    def _changed(self, node: NodeState) -> None:
        self._versions += 1
        node.version = self._versions
        self._index.touched(node.name)
        self._evaluations.prepare(node)
        for impl in self._policies.values():
            impl.node_changed(node)

    # --- decisions ------------------------------------------------------------------------------
    def evaluate(self, pod: PodRequest, node_name: str, policy: PlacementPolicy | None = None) -> Evaluation | FitFailure:
        node = self.nodes.get(node_name)
        if node is None:
            return FitFailure.UNKNOWN_NODE
        return self._evaluations.evaluate(self.policy(policy), node, pod)

    def evaluate_many(self, pod: PodRequest, names: Iterable[str], policy: PlacementPolicy | None = None) -> dict[str, Evaluation | FitFailure]:
        """`evaluate` for every name, with the per-pod work done once (the extender's cycles)."""
        return self._evaluations.evaluate_many(self.policy(policy), self.nodes, pod, names)

    def evaluate_without(self, pod: PodRequest, node_name: str, evicted: Iterable[PodUid]) -> Evaluation | FitFailure:
        """`evaluate` as if the pods `evicted` (those of them held on this node) were gone: they
        are released, the node evaluated, and they are reserved again exactly as they were (the
        preemption question "would these victims make room?"). Leaves the state as it found it."""
        held = [(uid, self._pods[uid]) for uid in dict.fromkeys(evicted) if uid in self._pods and self._pods[uid][1].node == node_name]
        for uid, _ in held:
            self.release(uid)
        try:
            return self.evaluate(pod, node_name)
        finally:
            node = self.nodes[node_name]
            for uid, (request, placement) in held:
                # exactly what `release` took off: put it back as it was, no re-check needed
                self._apply(node, request, placement, +1)
                self._pods[uid] = (request, placement)

    def eviction_trial(self, pod: PodRequest, node_name: str) -> EvictionTrial:
        """`evaluate_without` for a run of victim sets on one node that differ a few pods at a
        time (`EvictionTrial`); the caller holds whatever lock serialises the cluster until the
        trial is closed."""
        return EvictionTrial(self, pod, node_name)

    def set_aside(self, node_name: str, evict: Iterable[PodUid], put_back: Iterable[SetAside] = ()) -> list[SetAside]:
        """Take the pods `evict` that are held on `node_name` off it, and put back pods an
        earlier call took off, exactly as they were (no re-check), deriving the node's new
        version once for all of them; returns what was taken off. What `put_back` gets must
        come from this node's calls, with nothing else changing the node in between: the seam
        of `EvictionTrial`, whose fit checks each differ from the last by a pod or a few."""
        node = self.nodes[node_name]
        taken: list[SetAside] = []
        for uid in evict:
            held = self._pods.get(uid)
            if held is None or held[1].node != node_name:
                continue
            del self._pods[uid]
            self._account(node, held[0], held[1], -1)
            taken.append((uid, held[0], held[1]))
        restored = False
        for uid, request, placement in put_back:
            self._account(node, request, placement, +1)
            self._pods[uid] = (request, placement)
            restored = True
        if taken or restored:
            self._changed(node)
        return taken

    def check_fit(self, pod: PodRequest, node_name: str) -> FitFailure | None:
        """None when the pod fits on the node, else why not (for the extender's FailedNodes)."""
        result = self.evaluate(pod, node_name)
        return result if isinstance(result, FitFailure) else None

    def fits(self, pod: PodRequest, node_name: str) -> bool:
        return self.check_fit(pod, node_name) is None

    def score(self, pod: PodRequest, node_name: str, policy: PlacementPolicy | None = None) -> float | None:
        """Higher is better; None when the pod does not fit. See `extender_scores` for 0..10."""
        result = self.evaluate(pod, node_name, policy)
        return None if isinstance(result, FitFailure) else result.score

    def place(self, pod: PodRequest, node_name: str, policy: PlacementPolicy | None = None) -> Placement | None:
        """The GPUs each container would get on this node (nothing is reserved)."""
        result = self.evaluate(pod, node_name, policy)
        if isinstance(result, FitFailure):
            return None
        return self._placement(pod, node_name, result)

    def schedule(self, pod: PodRequest, policy: PlacementPolicy | None = None, candidates: Iterable[str] | None = None) -> Placement | None:
        """Best node over `candidates` (default all), ties to the tie ranking; nothing reserved."""
        if candidates is None:
            impl = self.policy(policy)
            found = self._index.best(
                (impl.name, pod.shape),
                impl.epoch,
                self.nodes,
                self._rank,
                lambda name: self.evaluate(pod, name, policy),
                lambda names: self.evaluate_many(pod, names, policy),
            )
            return None if found is None else self._placement(pod, found[0], found[1])
        best: tuple[tuple[float, ...], int] | None = None
        best_node = ""
        best_eval: Evaluation | None = None
        rank = self._rank
        for name in candidates:
            result = self.evaluate(pod, name, policy)
            if isinstance(result, FitFailure):
                continue
            key = (result.key, -rank.get(name, 1 << 30))
            if best is None or key > best:
                best, best_node, best_eval = key, name, result
        if best_eval is None:
            return None
        return self._placement(pod, best_node, best_eval)

    def _placement(self, pod: PodRequest, node_name: str, ev: Evaluation) -> Placement:
        node = self.nodes[node_name]
        by_index = {g.index: g for g in node.gpus}
        containers = []
        for c, indices in zip(pod.gpu_containers, ev.assignment):
            grants = tuple(
                GpuGrant(i, MILLI_PER_GPU, by_index[i].memory_mib) if c.whole else GpuGrant(i, c.gpu_milli, c.gpu_memory_mib or 0)
                for i in indices
            )
            containers.append(ContainerPlacement(c.name, grants))
        return Placement(node_name, tuple(containers), ev.score)

    # --- bookkeeping ----------------------------------------------------------------------------
    def reserve(self, pod: PodRequest, placement: Placement) -> None:
        """Commit a placement after re-checking it against the current state; raises
        `ReserveConflict` (and changes nothing) when it no longer fits. Idempotent for a pod
        already holding exactly this placement (kube-scheduler retries a bind)."""
        self._reserve(pod, placement, share_cap=True)

    def hold(self, pod: PodRequest, placement: Placement) -> None:
        """Count a placement the API server already records (another scheduler's allocation),
        past capacity if need be, so that what is counted does not depend on the order records
        arrive in; only one naming GPUs the node lacks is refused (`ReserveConflict`)."""
        self._reserve(pod, placement, share_cap=False, force=True)

    def _reserve(self, pod: PodRequest, placement: Placement, *, share_cap: bool, force: bool = False) -> None:
        """`share_cap=False` for pods that already run (inventory replaced, restore after a
        restart): a lowered max-shares-per-gpu blocks new shares but never evicts. `force`: count
        the placement even where it does not fit (host resources, health, model, idleness,
        capacity); only a placement naming GPUs the node lacks, or not matching the pod's
        containers, is refused, because it cannot be counted anywhere."""
        held = self._pods.get(pod.uid)
        if held is not None:
            if held[1].node == placement.node and held[1].containers == placement.containers:
                return
            raise ReserveConflict(f"pod {pod.uid} already holds GPUs on {held[1].node}")
        node = self.nodes.get(placement.node)
        if node is None:
            raise ReserveConflict(f"node {placement.node} is not in the inventory")
        if not force and (failure := host_fit(node, pod)) is not None:
            raise ReserveConflict(f"{placement.node}: {failure.value}")
        wanted = {c.name: c for c in pod.gpu_containers}
        if sorted(wanted) != sorted(c.name for c in placement.containers):
            raise ReserveConflict(f"placement does not cover the GPU containers of pod {pod.uid}")
        by_index = {g.index: g for g in node.gpus}
        need: dict[int, list[int]] = {}
        for cp in placement.containers:
            request = wanted[cp.name]
            if len(cp.grants) != request.gpu_count or len({g.index for g in cp.grants}) != request.gpu_count:
                raise ReserveConflict(f"container {cp.name}: {len(cp.grants)} GPUs granted, {request.gpu_count} requested")
            for grant in cp.grants:
                gpu = by_index.get(grant.index)
                if gpu is None:
                    raise ReserveConflict(f"{placement.node}: GPU {grant.index} is missing")
                if not force and not usable(gpu, pod):
                    raise ReserveConflict(f"{placement.node}: GPU {grant.index} is unhealthy or of another model")
                if not force and request.whole and not gpu.idle:
                    raise ReserveConflict(f"{placement.node}: GPU {grant.index} is not idle for a whole-GPU request")
                acc = need.setdefault(grant.index, [0, 0, 0])
                acc[0] += grant.milli
                acc[1] += grant.memory_mib
                acc[2] += 0 if request.whole else 1
        cap = node.max_shares_per_gpu if share_cap else None
        for index, (milli, memory, shares) in need.items():
            if force:
                break
            gpu = by_index[index]
            if milli > gpu.free_milli or memory > gpu.free_memory_mib:
                raise ReserveConflict(f"{placement.node}: GPU {index} has {gpu.free_milli} milli / {gpu.free_memory_mib} MiB free")
            if cap is not None and shares and gpu.shares + shares > cap:
                raise ReserveConflict(f"{placement.node}: GPU {index} already holds {gpu.shares} of at most {cap} shares")
        self._apply(node, pod, placement, +1)
        self._pods[pod.uid] = (pod, placement)

    def overcommitted(self, node_name: str) -> frozenset[int]:
        """Indices of the node's GPUs whose counted placements add up to more than the GPU, in
        compute or memory (only forced placements can do that)."""
        node = self.nodes.get(node_name)
        if node is None:
            return frozenset()
        return frozenset(g.index for g in node.gpus if g.used_milli > MILLI_PER_GPU or g.used_memory_mib > g.memory_mib)

    def release(self, uid: PodUid) -> Placement | None:
        """Free what a pod holds (deleted, failed, or its bind was abandoned)."""
        held = self._pods.pop(uid, None)
        if held is None:
            return None
        pod, placement = held
        node = self.nodes.get(placement.node)
        if node is not None:
            self._apply(node, pod, placement, -1)
        return placement

    def _apply(self, node: NodeState, pod: PodRequest, placement: Placement, sign: int) -> None:
        self._account(node, pod, placement, sign)
        self._changed(node)

    def _account(self, node: NodeState, pod: PodRequest, placement: Placement, sign: int) -> None:
        """Add (`sign` +1) or take off (-1) what the placement uses; the caller then derives
        the node's new version (`_changed`)."""
        by_index = {g.index: g for g in node.gpus}
        offline = pod.app_class == "offline"
        for cp in placement.containers:
            for grant in cp.grants:
                gpu = by_index.get(grant.index)
                if gpu is None:
                    continue
                gpu.used_milli += sign * grant.milli
                gpu.used_memory_mib += sign * grant.memory_mib
                if grant.milli < MILLI_PER_GPU:  # a share, counted against max-shares-per-gpu
                    gpu.shares += sign
                if offline:
                    gpu.offline_milli += sign * grant.milli
        node.used_cpu_milli += sign * pod.cpu_milli
        node.used_memory_mib += sign * pod.memory_mib

    def allocated(self) -> Mapping[PodUid, Placement]:
        return {uid: placement for uid, (_, placement) in self._pods.items()}

    def placement(self, uid: PodUid) -> Placement | None:
        held = self._pods.get(uid)
        return None if held is None else held[1]

    def pod(self, uid: PodUid) -> PodRequest | None:
        held = self._pods.get(uid)
        return None if held is None else held[0]

    def usage(self) -> Usage:
        cap = used = gpus = 0
        for node in self.nodes.values():
            for g in node.gpus:
                if g.healthy:
                    gpus += 1
                    cap += MILLI_PER_GPU
                    used += g.used_milli
        return Usage(cap, used, gpus)

    # --- allocation records (tessera.model.contract) --------------------------------------------------
    def to_allocation(self, placement: Placement, assumed_at: str) -> Allocation:
        node = self.nodes[placement.node]
        by_index = {g.index: g for g in node.gpus}
        return Allocation(
            node=placement.node,
            assumed_at=assumed_at,
            containers={
                cp.name: tuple(
                    GpuShare(g.index, by_index[g.index].uuid, -(-g.milli // MILLI_PER_CORE), g.memory_mib) for g in cp.grants
                )
                for cp in placement.containers
            },
        )

    def restore(self, pod: PodRequest, allocation: Allocation, *, force: bool = False) -> Placement:
        """Re-reserve a pod from its allocation record (extender restart); raises ReserveConflict.
        `force`: count the record even past 100 % of its GPUs (a pod that may run); it still
        raises for a record naming a GPU the node does not have."""
        node = self.nodes.get(allocation.node)
        if node is None:
            raise ReserveConflict(f"node {allocation.node} is not in the inventory")
        by_index = {g.index: g for g in node.gpus}
        containers = []
        for name, shares in sorted(allocation.containers.items()):
            for s in shares:
                gpu = by_index.get(s.index)
                if gpu is None or (s.uuid and gpu.uuid and s.uuid != gpu.uuid):
                    raise ReserveConflict(f"{allocation.node}: GPU {s.index} ({s.uuid}) is not on the node any more")
            grants = tuple(GpuGrant(s.index, s.core * MILLI_PER_CORE, s.memory_mib) for s in shares)
            containers.append(ContainerPlacement(name, grants))
        order = {c.name: i for i, c in enumerate(pod.gpu_containers)}
        containers.sort(key=lambda cp: order.get(cp.name, len(order)))
        placement = Placement(allocation.node, tuple(containers))
        self._reserve(pod, placement, share_cap=False, force=force)
        return placement
