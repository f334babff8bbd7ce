"""Node scores for pods on dra pools (`POST <prefix>/dra/prioritize`), from ResourceSlices and ResourceClaims.

On a dra pool kube-scheduler's DRA allocator decides fit and picks the devices (first fit in slice
order); what it lacks is a node choice that looks at how full the GPUs are. This module gives it
one: the same `tessera.alloc.Cluster` scoring as the device-plugin route (the extender's policy,
default fragmentation-aware), over a view built from the API:

- nodes: every ResourceSlice of driver `gpu.tessera.dev` (`tessera_node.dra.slices`: one device per
  GPU named `gpu-<index>`, attributes index/uuid/model, capacity `cores` 100 and `memory`) is a
  `NodeState` of its `spec.nodeName`, one `GpuState` per device;
- usage: every ResourceClaim whose `status.allocation.devices.results` name that driver is
  reserved on the node that publishes the result's pool, one GPU per result, taking the result's
  `consumedCapacity` (`cores` in percent, `memory`), or the whole device when it has none (a
  claim allocated without consumable capacity);
- the pod: its claims (`spec.resourceClaims[].resourceClaimName`, or the name
  `status.resourceClaimStatuses` gives a claim generated from a template), and of each the
  requests whose `exactly.deviceClassName` ends with `.gpu.tessera.dev`: `count` devices of
  `capacity.requests` cores/memory each (no capacity: whole devices). A pod without such a
  request, and a node not in the view, score 0.

Why polling with a TTL, not watches: these scores only rank nodes kube-scheduler has already found
feasible, and its allocator still checks every claim against the claims it allocated itself, so
a view a few seconds old can only make a ranking less good, never a placement wrong. The view is
rebuilt at most once per `ttl_s`, and only when a /dra/prioritize asks for it (a stack without dra
pods never lists anything). The cost, at 5,000 GPU nodes of 8 GPUs: 5,000 slices of ~4.5 kB
(~22 MB of JSON) and every ResourceClaim of the cluster (~1.5 kB each: 40,000 claims ~60 MB) per
refresh, ~1-2 s of decoding in one Python process, paid by the request that finds the view
expired (kube-scheduler's httpTimeout must cover it) and at most every `ttl_s` seconds while dra
pods are scheduled. Within a TTL, pods placed by this scheduler are not in the view yet: a burst
may be steered towards the same node until the next refresh, where the allocator's fit check still
keeps it correct. At that scale a watch (informer) of slices and claims is the next step.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tessera.alloc import (
    MILLI_PER_CORE,
    MILLI_PER_GPU,
    Cluster,
    ContainerPlacement,
    ContainerRequest,
    Evaluation,
    GpuGrant,
    GpuState,
    InvalidRequest,
    NodeState,
    Placement,
    PlacementPolicy,
    PodRequest,
    PodUid,
    ReserveConflict,
    extender_scores,
    parse_quantity,
)
from tessera.kube.api import KubeApi, KubeApiError, KubeObject
from tessera.model.contract import DRA_CAPACITY_CORES, DRA_CAPACITY_MEMORY, DRA_DRIVER
from tessera.scheduler.extender_types import ExtenderArgs, HostPriority, host_priorities

log = logging.getLogger(__name__)

DEVICE_CLASS_SUFFIX: Final = f".{DRA_DRIVER}"  # the pools' DeviceClasses: <pool>.gpu.tessera.dev
MAX_POD_CLAIMS: Final = 32  # resource/v1 PodResourceClaimsMaxSize: a pod names at most this many
_MIB: Final = 1024 * 1024
MAX_SCORE: Final = 10  # kube-scheduler's MaxExtenderPriority


@dataclass(frozen=True)
class DraScoreSettings:
    """ttl_s: default 5 s, how old the view of slices and claims may be before a request rebuilds it."""

    ttl_s: float = 5.0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mib(value: Any) -> int:
    return int(parse_quantity(value) / _MIB)


def _cores_milli(value: Any) -> int:
    return int(parse_quantity(value) * MILLI_PER_CORE)


@dataclass(frozen=True)
class _NodeDevices:
    node: NodeState
    index_of: dict[str, int]  # device name -> GPU index


def node_from_slice(body: KubeObject) -> _NodeDevices | None:
    """The NodeState a Tessera ResourceSlice describes; None for another driver or no node."""
    spec = _mapping(body.get("spec"))
    node_name = spec.get("nodeName")
    if spec.get("driver") != DRA_DRIVER or not isinstance(node_name, str) or not node_name:
        return None
    gpus: list[GpuState] = []
    index_of: dict[str, int] = {}
    for device in _list(spec.get("devices")):
        device = _mapping(device)
        attributes = _mapping(device.get("attributes"))
        capacity = _mapping(device.get("capacity"))
        try:
            index = int(_mapping(attributes.get("index"))["int"])
            memory = _mib(_mapping(capacity.get(DRA_CAPACITY_MEMORY)).get("value"))
        except (KeyError, TypeError, ValueError, InvalidRequest):
            continue
        uuid = str(_mapping(attributes.get("uuid")).get("string") or "")
        model = str(_mapping(attributes.get("model")).get("string") or "")
        index_of[str(device.get("name"))] = index
        gpus.append(GpuState(index, uuid, model, memory))
    return _NodeDevices(NodeState(node_name, sorted(gpus, key=lambda g: g.index)), index_of)


def claim_usage(claim: KubeObject, uid: str, nodes: Mapping[str, _NodeDevices], pools: Mapping[str, str]) -> tuple[PodRequest, Placement] | None:
    """What an allocated claim holds, as a pod of one GPU container per device result and its
    placement; None when it holds no Tessera device (or on a node not in the view)."""
    allocation = _mapping(_mapping(claim.get("status")).get("allocation"))
    containers: list[ContainerRequest] = []
    grants: list[ContainerPlacement] = []
    node_name: str | None = None
    for i, result in enumerate(_list(_mapping(allocation.get("devices")).get("results"))):
        result = _mapping(result)
        if result.get("driver") != DRA_DRIVER:
            continue
        node_name = pools.get(str(result.get("pool")))
        view = nodes.get(node_name or "")
        index = view.index_of.get(str(result.get("device"))) if view is not None else None
        if view is None or index is None:
            return None
        gpu = next(g for g in view.node.gpus if g.index == index)
        consumed = _mapping(result.get("consumedCapacity"))
        milli = _cores_milli(consumed[DRA_CAPACITY_CORES]) if DRA_CAPACITY_CORES in consumed else MILLI_PER_GPU
        memory = _mib(consumed[DRA_CAPACITY_MEMORY]) if DRA_CAPACITY_MEMORY in consumed else gpu.memory_mib
        milli = min(max(milli, MILLI_PER_CORE), MILLI_PER_GPU)
        name = f"r{i}"
        containers.append(ContainerRequest(name, 1, milli, None if milli == MILLI_PER_GPU and not consumed else memory))
        grants.append(ContainerPlacement(name, (GpuGrant(index, milli, memory),)))
    if node_name is None or not containers:
        return None
    return PodRequest(PodUid(uid), tuple(containers)), Placement(node_name, tuple(grants))


def claim_request(claim: KubeObject) -> list[ContainerRequest]:
    """The GPU containers a (not yet allocated) claim asks for: its Tessera device requests."""
    out: list[ContainerRequest] = []
    devices = _mapping(_mapping(claim.get("spec")).get("devices"))
    for i, request in enumerate(_list(devices.get("requests"))):
        exactly = _mapping(_mapping(request).get("exactly"))
        device_class = exactly.get("deviceClassName")
        if not isinstance(device_class, str) or not device_class.endswith(DEVICE_CLASS_SUFFIX):
            continue
        if exactly.get("allocationMode", "ExactCount") != "ExactCount":
            raise InvalidRequest(f"request {i}: allocationMode {exactly.get('allocationMode')!r} is not scored")
        count = exactly.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 128:
            raise InvalidRequest(f"request {i}: count {count!r}")
        wanted = _mapping(_mapping(exactly.get("capacity")).get("requests"))
        milli = _cores_milli(wanted[DRA_CAPACITY_CORES]) if DRA_CAPACITY_CORES in wanted else MILLI_PER_GPU
        memory = _mib(wanted[DRA_CAPACITY_MEMORY]) if DRA_CAPACITY_MEMORY in wanted else None
        milli = min(max(milli, MILLI_PER_CORE), MILLI_PER_GPU)
        if milli == MILLI_PER_GPU and memory is None:
            out.append(ContainerRequest(f"r{i}", count, MILLI_PER_GPU))
        else:
            # a share on each of `count` devices: one container per device (distinct devices are
            # not enforced by the model, which at worst ranks such a node a little too well)
            out.extend(ContainerRequest(f"r{i}-{d}", 1, milli, memory) for d in range(count))
    return out


def pod_claim_names(pod: KubeObject) -> list[str]:
    """The ResourceClaims a pod uses: named directly, or generated from a template (the name
    kube-controller-manager records in `status.resourceClaimStatuses`)."""
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in map(_mapping, _list(_mapping(pod.get("status")).get("resourceClaimStatuses")))
    }
    names: list[str] = []
    for entry in map(_mapping, _list(_mapping(pod.get("spec")).get("resourceClaims"))[:MAX_POD_CLAIMS]):
        name = entry.get("resourceClaimName") or generated.get(str(entry.get("name")))
        if isinstance(name, str) and name:
            names.append(name)
    return names


class DraScorer:
    """Ranks the candidate nodes of a dra pod as the extender's policy would (0..10)."""

    def __init__(
        self,
        api: KubeApi,
        policy: PlacementPolicy,
        settings: DraScoreSettings = DraScoreSettings(),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._policy = policy
        self._settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._cluster: Cluster | None = None
        self._built_at = 0.0
        self.refreshes = 0

    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        """Scores advise and never block (the entry is ignorable), so a failure of our own is
        logged and answered with 0 everywhere rather than a 5xx."""
        names = args.candidate_names()
        try:
            return self._prioritize(args, names)
        except Exception:  # advice only: a bug here must not fail the scheduling cycle
            log.exception("dra scores: cannot score pod %s; every node scores 0", _mapping(args.pod.get("metadata")).get("name"))
            return host_priorities(names, {})

    def _prioritize(self, args: ExtenderArgs, names: list[str]) -> list[HostPriority]:
        request = self._pod_request(args.pod)
        if request is None or not request.gpu_containers:
            return host_priorities(names, {})
        with self._lock:
            cluster = self._view()
            if cluster is None:
                return host_priorities(names, {})
            known = [n for n in names if n in cluster.nodes]
            evaluations = cluster.evaluate_many(request, known)
        return host_priorities(names, ranked(evaluations))

    def _pod_request(self, pod: KubeObject) -> PodRequest | None:
        meta = _mapping(pod.get("metadata"))
        namespace = meta.get("namespace") or "default"
        containers: list[ContainerRequest] = []
        try:
            for name in pod_claim_names(pod):
                containers.extend(claim_request(self._api.get_resource_claim(str(namespace), name)))
        except KubeApiError as exc:
            log.info("dra scores: cannot read a claim of pod %s/%s: %s", namespace, meta.get("name"), exc)
            return None
        except (InvalidRequest, TypeError, ValueError, AttributeError) as exc:
            log.info("dra scores: pod %s/%s: claim not scored: %s", namespace, meta.get("name"), exc)
            return None
        if not containers:
            return None
        return PodRequest(PodUid(str(meta.get("uid") or "")), tuple(containers), namespace=str(namespace), name=str(meta.get("name") or ""))

    def _view(self) -> Cluster | None:
        """The cluster view, rebuilt when older than the TTL; on an API error the last one."""
        now = self._clock()
        if self._cluster is not None and now - self._built_at < self._settings.ttl_s:
            return self._cluster
        try:
            slices = self._api.list_resource_slices(driver=DRA_DRIVER)
            claims = self._api.list_resource_claims()
        except KubeApiError as exc:
            log.warning("dra scores: cannot list ResourceSlices/ResourceClaims (%s); scoring from the last view", exc)
            return self._cluster
        self._cluster = build_view(slices, claims, self._policy)
        self._built_at = now
        self.refreshes += 1
        return self._cluster


def ranked(evaluations: Mapping[str, object]) -> dict[str, int]:
    """0..10 by `extender_scores`, with 10 only for the policy's best key (its tie-breaks
    included), so the node `Cluster.schedule` would pick is the one kube-scheduler sees on top."""
    valid = {n: e for n, e in evaluations.items() if isinstance(e, Evaluation)}
    scores = extender_scores({n: (e.score if isinstance(e, Evaluation) else None) for n, e in evaluations.items()})
    if valid:
        best = max(e.key for e in valid.values())
        for name, e in valid.items():
            if e.key != best and scores[name] == MAX_SCORE:
                scores[name] = MAX_SCORE - 1
    return scores


def build_view(slices: Iterable[KubeObject], claims: Iterable[KubeObject], policy: PlacementPolicy) -> Cluster:
    """A `Cluster` of the slices' nodes with the allocated claims reserved on them."""
    cluster = Cluster(policy=policy)
    nodes: dict[str, _NodeDevices] = {}
    pools: dict[str, str] = {}
    for body in slices:
        view = node_from_slice(body)
        if view is None or view.node.name in nodes:
            continue
        nodes[view.node.name] = view
        pools[str(_mapping(_mapping(body.get("spec")).get("pool")).get("name"))] = view.node.name
        cluster.add_node(view.node)
    for claim in claims:
        meta = _mapping(claim.get("metadata"))
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        try:
            usage = claim_usage(claim, uid, nodes, pools)
        except (InvalidRequest, TypeError, ValueError, KeyError) as exc:
            log.info("dra scores: claim %s/%s not counted: %s", meta.get("namespace"), meta.get("name"), exc)
            continue
        if usage is None:
            continue
        try:
            cluster.reserve(*usage)
        except (ReserveConflict, InvalidRequest) as exc:
            log.info("dra scores: claim %s/%s not counted: %s", meta.get("namespace"), meta.get("name"), exc)
    return cluster
