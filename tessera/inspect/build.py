"""Building the picture `tessera inspect` shows (`tessera.inspect.views`) from Node and Pod objects.

Pure functions over plain dicts (as the API server returns them). Decoding goes through the code
the scheduler extender rebuilds its cache with, so both see the same cluster:

- which nodes are shared GPU nodes: `tessera.scheduler.state.is_shared_gpu_node`, and their GPUs
  (index, UUID, model, memory, health) from `tessera.dev/gpus` via `node_state_from_k8s`;
- what a pod holds: its `tessera.dev/allocation` record (`contract.Allocation`); what it asks
  for and its app class: `pod_request_from_k8s`;
- Succeeded and Failed pods hold nothing; a record whose pod is bound to another node than it
  names, or names a node or GPU that is gone, is not counted (the extender releases or cannot
  restore it) but is flagged; an annotated pod not bound yet holds its reservation (flagged).

Whole-GPU pools (nvidia, mig, timeslice) are summarised per node: allocatable `nvidia.com/*`
resources against what the node's pods request (kubectl's "Allocated resources" rule).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from tessera.alloc import MILLI_PER_CORE, InvalidRequest, NodeState, PodRequest, node_state_from_k8s, parse_quantity, pod_request_from_k8s
from tessera.alloc.kube_objects import container_resources
from tessera.alloc.pod_requests import pod_requests
from tessera.model.contract import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_APP_CLASS,
    ANNOTATION_NODE_GPUS,
    CORE_PER_GPU,
    GPU_CORE,
    GPU_MEMORY,
    LABEL_GPU_PLACEMENT,
    LABEL_POOL,
    LABEL_POOL_KIND,
    LABEL_SHARING_POLICY,
    Allocation,
)
from tessera.inspect.stranded import StrandedMeter
from tessera.inspect.views import (
    ContainerShare,
    FilterError,
    FlaggedPod,
    GpuView,
    Inspection,
    PendingPod,
    Pool,
    Reason,
    ResourceUse,
    SharedNode,
    Totals,
    WholeGpuNode,
)
from tessera.kube.api import KubeObject
from tessera.scheduler.state import is_shared_gpu_node

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})  # pods that hold nothing (as the extender)
WHOLE_GPU_KINDS: Final = frozenset({"nvidia", "mig", "timeslice"})
NVIDIA_RESOURCE_PREFIX: Final = "nvidia.com/"


# --- small readers --------------------------------------------------------------------------------
def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (_meta(obj).get("labels") or {}).items()}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _meta(obj).get("annotations") or {}


def _pod_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = _meta(pod)
    return str(meta.get("namespace") or "default"), str(meta.get("name", ""))


def node_status(node: Mapping[str, Any]) -> str:
    """The STATUS kubectl shows for a node."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"), None)
    text = "Unknown" if ready is None else {"True": "Ready", "False": "NotReady"}.get(str(ready.get("status")), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _asks_tessera(pod: Mapping[str, Any]) -> bool:
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(key in container_resources(c) for c in containers for key in (GPU_CORE, GPU_MEMORY))


def nvidia_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """A pod's effective `nvidia.com/*` requests, as kube-scheduler counts them (`pod_requests`:
    app containers and sidecars summed, the largest init container phase if bigger, plus overhead)."""
    try:
        total = pod_requests(pod)
    except InvalidRequest:
        return {}  # the API server would not have admitted it; count nothing
    return {k: int(v) for k, v in total.items() if k.startswith(NVIDIA_RESOURCE_PREFIX) and v > 0}


def _quantity(value: object) -> Decimal:
    try:
        return parse_quantity(value)
    except InvalidRequest:
        return Decimal(0)  # the API server would not have admitted it; count nothing


def _nvidia_allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    out = {str(k): int(_quantity(v)) for k, v in allocatable.items() if str(k).startswith(NVIDIA_RESOURCE_PREFIX)}
    return {k: v for k, v in out.items() if v > 0}


# --- building ---------------------------------------------------------------------------------------
@dataclass
class _SharedAcc:
    node: KubeObject
    state: NodeState | None
    problem: str | None
    shares: dict[int, list[ContainerShare]] = field(default_factory=dict)


@dataclass
class _WholeAcc:
    node: KubeObject
    allocatable: dict[str, int]
    requested: dict[str, int] = field(default_factory=dict)
    pods: int = 0


def _classify_nodes(nodes: Iterable[KubeObject]) -> tuple[dict[str, _SharedAcc], dict[str, _WholeAcc], set[str]]:
    """(shared GPU nodes, whole-GPU nodes, every node name)."""
    shared: dict[str, _SharedAcc] = {}
    whole: dict[str, _WholeAcc] = {}
    names: set[str] = set()
    for node in nodes:
        name = str(_meta(node).get("name", ""))
        names.add(name)
        kind = _labels(node).get(LABEL_POOL_KIND, "")
        if is_shared_gpu_node(node):
            try:
                state = node_state_from_k8s(node)
                problem = None
            except InvalidRequest as exc:
                state, problem = None, str(exc)
            if state is None and problem is None and kind == "shared":
                problem = (
                    f"no GPU inventory ({ANNOTATION_NODE_GPUS} annotation) reported yet: "
                    "is the Tessera device plugin running on this node?"
                )
            if state is not None or problem is not None:
                shared[name] = _SharedAcc(node, state, problem)
                continue
        allocatable = _nvidia_allocatable(node)
        if kind in WHOLE_GPU_KINDS or (not kind and allocatable):
            whole[name] = _WholeAcc(node, allocatable)
    return shared, whole, names


def _request(pod: KubeObject) -> tuple[PodRequest | None, str | None]:
    try:
        return pod_request_from_k8s(pod), None
    except InvalidRequest as exc:
        return None, str(exc)


def _place_record(
    pod: KubeObject, allocation: Allocation, request: PodRequest | None, shared: Mapping[str, _SharedAcc], known: set[str]
) -> list[FlaggedPod]:
    """Add a record's shares to its node's GPUs; the flags it earns (not counted when flagged gone)."""
    namespace, name = _pod_key(pod)
    bound_to = (pod.get("spec") or {}).get("nodeName")
    if bound_to and bound_to != allocation.node:
        detail = f"bound to {bound_to} but its allocation record names {allocation.node}; the extender ignores the record"
        return [FlaggedPod(namespace, name, allocation.node, Reason.NODE_MISMATCH, detail)]
    target = shared.get(allocation.node)
    if target is None or target.state is None:
        if allocation.node not in known:
            why = "is not in the cluster"
        elif target is None:
            why = "is not a shared GPU node"
        else:
            why = "reports no usable GPU inventory"
        detail = f"its allocation record names node {allocation.node}, which {why}; the reservation is not counted"
        return [FlaggedPod(namespace, name, allocation.node, Reason.NODE_GONE, detail)]
    by_index = {g.index: g for g in target.state.gpus}
    for container, gpu_shares in sorted(allocation.containers.items()):
        for s in gpu_shares:
            gpu = by_index.get(s.index)
            if gpu is None or (s.uuid and gpu.uuid and s.uuid != gpu.uuid):
                detail = f"container {container}: GPU {s.index} ({s.uuid}) is not on node {allocation.node} any more; not counted"
                return [FlaggedPod(namespace, name, allocation.node, Reason.GPU_GONE, detail)]
    app_class = request.app_class if request is not None else (str(_annotations(pod).get(ANNOTATION_APP_CLASS) or "") or None)
    phase = str((pod.get("status") or {}).get("phase") or "Unknown")
    flags: list[FlaggedPod] = []
    unhealthy: set[int] = set()
    for container, gpu_shares in sorted(allocation.containers.items()):
        for s in gpu_shares:
            share = ContainerShare(namespace, name, container, s.index, s.core, s.memory_mib, app_class, phase, bool(bound_to))
            target.shares.setdefault(s.index, []).append(share)
            if not by_index[s.index].healthy:
                unhealthy.add(s.index)
    if not bound_to:
        detail = (
            f"reserved on {allocation.node} at {allocation.assumed_at} but not bound; counted until it binds or the "
            "extender's assume TTL (300 s by default) releases it"
        )
        flags.append(FlaggedPod(namespace, name, allocation.node, Reason.UNBOUND, detail))
    if unhealthy:
        gpus = ", ".join(str(i) for i in sorted(unhealthy))
        detail = f"holds a share of unhealthy GPU {gpus} on {allocation.node}; the device plugin evicts it"
        flags.append(FlaggedPod(namespace, name, allocation.node, Reason.UNHEALTHY_GPU, detail))
    return flags


def _gpu_views(acc: _SharedAcc, meter: StrandedMeter) -> tuple[tuple[GpuView, ...], float | None]:
    if acc.state is None:
        return (), None
    views: list[GpuView] = []
    for g in acc.state.gpus:
        shares = tuple(sorted(acc.shares.get(g.index, []), key=lambda s: (s.namespace, s.pod, s.container)))
        core = sum(s.core for s in shares)
        memory = sum(s.memory_mib for s in shares)
        stranded = meter.gpu_stranded(g.model, g.healthy, core * MILLI_PER_CORE, _free(core, memory, g.memory_mib))
        views.append(GpuView(g.index, g.uuid, g.model, g.memory_mib, g.healthy, core, memory, shares, stranded))
    healthy_free = [_free(v.core_allocated, v.memory_allocated_mib, v.memory_mib) for v in views if v.healthy]
    stranded_gpu = meter.node_stranded_gpu(acc.state.models, healthy_free) if healthy_free else (0.0 if meter.known else None)
    return tuple(views), None if stranded_gpu is None else round(stranded_gpu, 3)


def _free(core: int, memory_mib: int, capacity_mib: int) -> tuple[int, int]:
    """(free milli-GPU, free MiB) of a GPU, never negative (an overcommitted GPU has none)."""
    return max(CORE_PER_GPU - core, 0) * MILLI_PER_CORE, max(capacity_mib - memory_mib, 0)


@dataclass
class _PodFindings:
    flagged: list[FlaggedPod] = field(default_factory=list)
    pending: list[PendingPod] = field(default_factory=list)
    requests: list[PodRequest] = field(default_factory=list)  # GPU requests seen: the workload mix


def _read_pods(pods: Iterable[KubeObject], shared: Mapping[str, _SharedAcc], whole: Mapping[str, _WholeAcc], known: set[str]) -> _PodFindings:
    """Add every pod to the node accumulators; what needs attention and what waits."""
    found = _PodFindings()
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        namespace, name = _pod_key(pod)
        bound_to = str((pod.get("spec") or {}).get("nodeName") or "")
        if bound_to in whole and (asked := nvidia_requests(pod)):
            held = whole[bound_to]
            held.pods += 1
            for key, value in asked.items():
                held.requested[key] = held.requested.get(key, 0) + value
        request, request_error = _request(pod)
        if request is not None and request.gpu_containers:
            found.requests.append(request)
        record = _annotations(pod).get(ANNOTATION_ALLOCATION)
        if record:
            try:
                allocation = Allocation.from_json(str(record))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                detail = f"its {ANNOTATION_ALLOCATION} annotation is not a valid record ({type(exc).__name__}: {exc}); not counted"
                found.flagged.append(FlaggedPod(namespace, name, bound_to, Reason.UNREADABLE_RECORD, detail))
                continue
            found.flagged += _place_record(pod, allocation, request, shared, known)
        elif request_error is not None and _asks_tessera(pod):
            found.flagged.append(FlaggedPod(namespace, name, bound_to, Reason.INVALID_REQUEST, request_error))
        elif request is not None and request.gpu_containers:
            if bound_to:
                detail = (
                    f"bound to {bound_to} without an allocation record: the device plugin will not start it "
                    "(was it scheduled by tessera-scheduler?)"
                )
                found.flagged.append(FlaggedPod(namespace, name, bound_to, Reason.NO_RECORD, detail))
            else:
                core = sum(c.gpu_core * c.gpu_count for c in request.gpu_containers)
                memory = sum((c.gpu_memory_mib or 0) * c.gpu_count for c in request.gpu_containers)
                found.pending.append(PendingPod(namespace, name, core, memory))
    return found


def _shared_node(name: str, acc: _SharedAcc, meter: StrandedMeter) -> SharedNode:
    labels = _labels(acc.node)
    gpus, stranded_gpu = _gpu_views(acc, meter)
    return SharedNode(
        name,
        labels.get(LABEL_POOL, ""),
        labels.get(LABEL_POOL_KIND, ""),
        node_status(acc.node),
        labels.get(LABEL_SHARING_POLICY, ""),
        labels.get(LABEL_GPU_PLACEMENT, ""),
        gpus,
        Totals.of_gpus(gpus, stranded_gpu),
        acc.problem,
    )


def _whole_node(name: str, acc: _WholeAcc) -> WholeGpuNode:
    labels = _labels(acc.node)
    keys = sorted(set(acc.allocatable) | set(acc.requested))
    resources = tuple(ResourceUse(k, acc.allocatable.get(k, 0), acc.requested.get(k, 0)) for k in keys)
    return WholeGpuNode(name, labels.get(LABEL_POOL, ""), labels.get(LABEL_POOL_KIND, ""), node_status(acc.node), resources, acc.pods)


def build(nodes: Iterable[KubeObject], pods: Iterable[KubeObject], *, source: str = "") -> Inspection:
    """The whole cluster's picture (see `select` to narrow it to some nodes or pools)."""
    shared, whole, known = _classify_nodes(nodes)
    found = _read_pods(pods, shared, whole, known)
    meter = StrandedMeter(found.requests)
    return _assemble(
        source,
        sorted((_shared_node(name, acc, meter) for name, acc in shared.items()), key=lambda n: (n.pool, n.name)),
        sorted((_whole_node(name, acc) for name, acc in whole.items()), key=lambda n: (n.pool, n.name)),
        sorted(found.flagged, key=lambda f: (f.namespace, f.pod, f.reason.value)),
        sorted(found.pending, key=lambda p: (p.namespace, p.pod)),
        (),
        (),
    )


def _assemble(
    source: str,
    shared_nodes: Sequence[SharedNode],
    whole_nodes: Sequence[WholeGpuNode],
    flagged: Sequence[FlaggedPod],
    pending: Sequence[PendingPod],
    node_filter: tuple[str, ...],
    pool_filter: tuple[str, ...],
) -> Inspection:
    pools: dict[str, tuple[list[SharedNode], list[WholeGpuNode]]] = {}
    for s in shared_nodes:
        pools.setdefault(s.pool, ([], []))[0].append(s)
    for w in whole_nodes:
        pools.setdefault(w.pool, ([], []))[1].append(w)
    pool_views = []
    for name in sorted(pools):
        s_nodes, w_nodes = pools[name]
        kinds = sorted({n.kind for n in s_nodes} | {n.kind for n in w_nodes})
        sums: dict[str, tuple[int, int]] = {}
        for w in w_nodes:
            for r in w.resources:
                a, q = sums.get(r.name, (0, 0))
                sums[r.name] = (a + r.allocatable, q + r.requested)
        resources = tuple(ResourceUse(k, a, q) for k, (a, q) in sorted(sums.items()))
        pool_views.append(
            Pool(
                name,
                ",".join(k for k in kinds if k),
                len(s_nodes) + len(w_nodes),
                sum(n.totals.pods for n in s_nodes) + sum(n.pods for n in w_nodes),
                Totals.combine(n.totals for n in s_nodes),
                resources,
            )
        )
    return Inspection(
        source,
        tuple(shared_nodes),
        tuple(whole_nodes),
        tuple(pool_views),
        Totals.combine(n.totals for n in shared_nodes),
        tuple(flagged),
        tuple(pending),
        node_filter,
        pool_filter,
    )


def select(inspection: Inspection, *, nodes: Sequence[str] = (), pools: Sequence[str] = ()) -> Inspection:
    """Only the given nodes and/or pools (both given: nodes of those pools); totals and pool rows
    are recomputed over what is shown. Pending pods (no node yet) are shown only unfiltered.
    Raises `FilterError` for a name that matches nothing."""
    if not nodes and not pools:
        return inspection
    all_nodes = [n.name for n in inspection.shared_nodes] + [n.name for n in inspection.whole_gpu_nodes]
    all_pools = sorted({p.name for p in inspection.pools if p.name})
    for name in nodes:
        if name not in all_nodes:
            raise FilterError(f"no GPU node named {name!r} in {inspection.source or 'the cluster'} (GPU nodes: {_some(sorted(all_nodes))})")
    for name in pools:
        if name not in all_pools:
            raise FilterError(f"no pool named {name!r} in {inspection.source or 'the cluster'} (pools: {_some(all_pools)})")

    def keep(node: str, pool: str) -> bool:
        return (not nodes or node in nodes) and (not pools or pool in pools)

    shared_nodes = [n for n in inspection.shared_nodes if keep(n.name, n.pool)]
    whole_nodes = [n for n in inspection.whole_gpu_nodes if keep(n.name, n.pool)]
    shown = {n.name for n in shared_nodes} | {n.name for n in whole_nodes}
    flagged = [f for f in inspection.flagged if f.node in shown]
    return _assemble(inspection.source, shared_nodes, whole_nodes, flagged, (), tuple(nodes), tuple(pools))


def _some(names: Sequence[str], limit: int = 10) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
