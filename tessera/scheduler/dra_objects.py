"""Reading the resource.k8s.io/v1 objects of dra pools for the extender: a Tessera ResourceSlice as
the node it describes, an allocated ResourceClaim as what it holds, a pod's claims as what it asks.

- a ResourceSlice of driver `gpu.tessera.dev` (`tessera_node.dra.slices`: one device per GPU named
  `gpu-<index>`, attributes index/uuid/model, capacity `cores` 100 and `memory`) is a `NodeState`
  of its `spec.nodeName`, one `GpuState` per device, whatever order the devices are listed in;
- an allocated ResourceClaim whose `status.allocation.devices.results` name that driver holds, on
  the node that publishes the result's pool, one GPU per result, taking the result's
  `consumedCapacity` (`cores` in percent, `memory`), or the whole device when it has none (a
  claim allocated without consumable capacity);
- a pod asks for its claims (`spec.resourceClaims[].resourceClaimName`, or the name
  `status.resourceClaimStatuses` gives a claim generated from a template), and of each the
  requests whose `exactly.deviceClassName` ends with `.gpu.tessera.dev`: `count` devices of
  `capacity.requests` cores/memory each (no capacity: whole devices).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tessera.alloc import (
    MILLI_PER_CORE,
    MILLI_PER_GPU,
    ContainerPlacement,
    ContainerRequest,
    GpuGrant,
    GpuState,
    InvalidRequest,
    NodeState,
    Placement,
    PodRequest,
    PodUid,
    parse_quantity,
)
from tessera.kube.api import KubeObject
from tessera.model.contract import DRA_CAPACITY_CORES, DRA_CAPACITY_MEMORY, DRA_DRIVER

DEVICE_CLASS_SUFFIX: Final = f".{DRA_DRIVER}"  # the pools' DeviceClasses: <pool>.gpu.tessera.dev
MAX_POD_CLAIMS: Final = 32  # resource/v1 PodResourceClaimsMaxSize: a pod names at most this many
_MIB: Final = 1024 * 1024


def mapping_of(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def list_of(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mib(value: Any) -> int:
    return int(parse_quantity(value) / _MIB)


def _cores_milli(value: Any) -> int:
    return int(parse_quantity(value) * MILLI_PER_CORE)


@dataclass(frozen=True)
class NodeDevices:
    """A node as its Tessera ResourceSlice describes it, and which device is which GPU."""

    node: NodeState
    index_of: dict[str, int]  # device name -> GPU index


def node_from_slice(body: KubeObject) -> NodeDevices | None:
    """The NodeState a Tessera ResourceSlice describes; None for another driver or no node."""
    spec = mapping_of(body.get("spec"))
    node_name = spec.get("nodeName")
    if spec.get("driver") != DRA_DRIVER or not isinstance(node_name, str) or not node_name:
        return None
    gpus: list[GpuState] = []
    index_of: dict[str, int] = {}
    for device in list_of(spec.get("devices")):
        device = mapping_of(device)
        attributes = mapping_of(device.get("attributes"))
        capacity = mapping_of(device.get("capacity"))
        try:
            index = int(mapping_of(attributes.get("index"))["int"])
            memory = _mib(mapping_of(capacity.get(DRA_CAPACITY_MEMORY)).get("value"))
        except (KeyError, TypeError, ValueError, InvalidRequest):
            continue
        uuid = str(mapping_of(attributes.get("uuid")).get("string") or "")
        model = str(mapping_of(attributes.get("model")).get("string") or "")
        index_of[str(device.get("name"))] = index
        gpus.append(GpuState(index, uuid, model, memory))
    return NodeDevices(NodeState(node_name, sorted(gpus, key=lambda g: g.index)), index_of)


def claim_usage(claim: KubeObject, uid: str, nodes: Mapping[str, NodeDevices], pools: Mapping[str, str]) -> tuple[PodRequest, Placement] | None:
    """What an allocated claim holds, as a pod of one GPU container per device result and its
    placement; None when it holds no Tessera device (or on a node not in the view)."""
    allocation = mapping_of(mapping_of(claim.get("status")).get("allocation"))
    containers: list[ContainerRequest] = []
    grants: list[ContainerPlacement] = []
    node_name: str | None = None
    for i, result in enumerate(list_of(mapping_of(allocation.get("devices")).get("results"))):
        result = mapping_of(result)
        if result.get("driver") != DRA_DRIVER:
            continue
        node_name = pools.get(str(result.get("pool")))
        view = nodes.get(node_name or "")
        index = view.index_of.get(str(result.get("device"))) if view is not None else None
        if view is None or index is None:
            return None
        gpu = next(g for g in view.node.gpus if g.index == index)
        consumed = mapping_of(result.get("consumedCapacity"))
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
    devices = mapping_of(mapping_of(claim.get("spec")).get("devices"))
    for i, request in enumerate(list_of(devices.get("requests"))):
        exactly = mapping_of(mapping_of(request).get("exactly"))
        device_class = exactly.get("deviceClassName")
        if not isinstance(device_class, str) or not device_class.endswith(DEVICE_CLASS_SUFFIX):
            continue
        if exactly.get("allocationMode", "ExactCount") != "ExactCount":
            raise InvalidRequest(f"request {i}: allocationMode {exactly.get('allocationMode')!r} is not scored")
        count = exactly.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 128:
            raise InvalidRequest(f"request {i}: count {count!r}")
        wanted = mapping_of(mapping_of(exactly.get("capacity")).get("requests"))
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
        for s in map(mapping_of, list_of(mapping_of(pod.get("status")).get("resourceClaimStatuses")))
    }
    names: list[str] = []
    for entry in map(mapping_of, list_of(mapping_of(pod.get("spec")).get("resourceClaims"))[:MAX_POD_CLAIMS]):
        name = entry.get("resourceClaimName") or generated.get(str(entry.get("name")))
        if isinstance(name, str) and name:
            names.append(name)
    return names
