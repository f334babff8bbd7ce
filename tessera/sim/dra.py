"""kube-scheduler's structured-parameters allocator for one claim on one node, as the simulator needs it.

Written from kubernetes/kubernetes `staging/src/k8s.io/dynamic-resource-allocation/structured/`:

- `internal/experimental/allocator_experimental.go` (`allocator.go` picks the most stable of its
  stable, incubating and experimental allocators that supports every enabled feature; the
  experimental one supports them all, consumable capacity included): `allocateOne` walks pools, their
  slices and each slice's devices *in order* and takes the first device that is not in use, matches
  the class and request selectors, and has the capacity (`CmpRequestOverCapacity`); the first
  complete solution wins, there is no scoring ("The first full solution is chosen"). A request of
  `count` N repeats that N times. `allocateDevice`: a device without `allowMultipleAllocations`
  is marked in use (a second claim, or the same claim again, cannot take it); one with it is not,
  and only its remaining capacity limits it (also within one request: what this run already took
  is counted as `allocatingCapacity`).
- `internal/experimental/consumable_capacity.go`: `calculateConsumedQuantity` (a capacity the
  request does not name consumes `requestPolicy.default`, else the whole value; a named one is
  rounded up by `roundUpRange`: below `validRange.min` to min, else up to min + k x step),
  `violatesPolicy` (above `validRange.max`, or off the step grid: the device is skipped), and the
  sum check (already consumed + allocating + this request must not pass the capacity's value).
- `staging/src/k8s.io/api/resource/v1/types.go`, `Device.allowMultipleAllocations`: "all of its
  capacity is consumable, regardless of whether the requestPolicy is defined or not".

The device layout is Tessera's (`node-agent/tessera_node/dra/slices.py`, one slice per node, one
device per healthy GPU, fullest first for binpack and emptiest first for spread, as the plugin
re-lists them after each prepare; here the order is always current): `cores` 100 with
requestPolicy {default 100, min 1, max 100, step 1}; `memory` the GPU's MiB with {default: all of
it, min 1Mi, step 1Mi}; `allowMultipleAllocations` unless the pool gives one claim per GPU
(`max_shares_per_gpu` 1).
Units here are whole cores (percent of a GPU) and MiB. A GPU whose memory the trace does not give
(`tessera.alloc` counts it as untracked) gets no `memory` capacity: there is nothing to publish.

A claim is what Tessera's ResourceClaimTemplate asks for (`tessera/manifests/workloads.py`,
`claim_template`): a share asks one device with `cores` = the share in percent, rounded up, and
`memory` only when the container gives one; N whole GPUs ask N devices with `cores: 100`. On
such a device a claim without `memory` consumes the default, i.e. *all* of the GPU's memory, so
it shares the GPU with nobody: modelled as kube-scheduler does it, not as Tessera would like it.

Node choice (which node's slice this runs on: the pool's node policy, or kube-scheduler's default
scoring, with kube-scheduler's plugin weights) is `tessera.sim.dra_route`.

Not modelled: CEL selectors other than the GPU model (`gpu_spec`), constraints, admin access,
prioritized lists, device taints, partitionable devices, several claims per pod (one pod = one
claim per GPU container, allocated container after container), fractional ranges.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from tessera.alloc import MILLI_PER_CORE, MILLI_PER_GPU, ContainerRequest, GpuState, NodeState
from tessera.model.contract import CORE_PER_GPU, DRA_CAPACITY_CORES, DRA_CAPACITY_MEMORY, dra_device_order
from tessera.model.pool_policy import DEFAULT_POOL_POLICY

UNTRACKED_MEMORY: Final = 1 << 62  # tessera.alloc's "not accounted" capacity (trace without gpu_mem_mib)


@dataclass(frozen=True)
class RequestPolicy:
    """`CapacityRequestPolicy` with a `validRange` (the only kind Tessera publishes)."""

    default: int
    min: int
    step: int | None = None
    max: int | None = None


@dataclass(frozen=True)
class Capacity:
    value: int
    policy: RequestPolicy | None = None


@dataclass
class Device:
    """One device of a node's slice and what is allocated on it."""

    name: str
    index: int
    model: str
    capacity: Mapping[str, Capacity]
    multiple: bool  # allowMultipleAllocations
    consumed: dict[str, int] = field(default_factory=dict)  # capacity name -> amount held by claims already allocated
    in_use: bool = False  # allocated at all (what matters for devices without `multiple`)


@dataclass(frozen=True)
class DeviceRequest:
    """`exactly: {count, capacity.requests}` of one request; `models`: the selector on the
    `model` attribute (None = any)."""

    count: int
    requests: Mapping[str, int] = field(default_factory=dict)
    models: frozenset[str] | None = None


@dataclass(frozen=True)
class DeviceResult:
    """One allocation result: the device and its `consumedCapacity` (empty without `multiple`)."""

    index: int
    consumed: Mapping[str, int]


def consumed_quantity(requested: int | None, capacity: Capacity) -> int:
    """`calculateConsumedQuantity` + `roundUpRange` on whole units."""
    policy = capacity.policy
    if requested is None:
        return policy.default if policy is not None else capacity.value
    if policy is None:
        return requested
    if requested < policy.min:
        return policy.min
    if policy.step is None:
        return requested
    steps = -(-(requested - policy.min) // policy.step)
    return policy.min + steps * policy.step


def violates_policy(value: int, policy: RequestPolicy | None) -> bool:
    """`violatesPolicy`: the default is always allowed; else above max or off the step grid."""
    if policy is None or value == policy.default:
        return False
    if policy.max is not None and value > policy.max:
        return True
    return policy.step is not None and (value - policy.min) % policy.step != 0


def consumption(device: Device, request: DeviceRequest) -> dict[str, int] | None:
    """What one allocation of `request` consumes on `device`; None when the device lacks a
    capacity the request names (`resolveCapacityRequests`: not satisfiable, skip the device)."""
    if any(name not in device.capacity for name in request.requests):
        return None
    return {name: consumed_quantity(request.requests.get(name), cap) for name, cap in device.capacity.items()}


def capacity_fits(device: Device, request: DeviceRequest, allocating: Mapping[str, int]) -> dict[str, int] | None:
    """`cmpRequestOverCapacity`: the consumption when it keeps every capacity within its value
    (counting what is consumed already and what this run is allocating), else None."""
    wanted = consumption(device, request)
    if wanted is None:
        return None
    for name, cap in device.capacity.items():
        value = wanted[name]
        if violates_policy(value, cap.policy):
            return None
        if device.consumed.get(name, 0) + allocating.get(name, 0) + value > cap.value:
            return None
    return wanted


def allocate(devices: Sequence[Device], request: DeviceRequest) -> list[DeviceResult] | None:
    """First fit in slice order for `count` devices; None when the node cannot serve the request.
    Nothing is changed (the caller records the result, as kube-scheduler's assume cache does)."""
    allocating: dict[int, dict[str, int]] = {}  # per device position: capacity taken by this run
    taken: set[int] = set()  # devices without `multiple` taken by this run
    results: list[DeviceResult] = []
    for _ in range(request.count):
        for pos, device in enumerate(devices):
            if not device.multiple and (device.in_use or pos in taken):
                continue
            if request.models is not None and device.model not in request.models:
                continue
            wanted = capacity_fits(device, request, allocating.get(pos, {}))
            if wanted is None:
                continue
            if device.multiple:
                acc = allocating.setdefault(pos, {})
                for name, value in wanted.items():
                    acc[name] = acc.get(name, 0) + value
                results.append(DeviceResult(device.index, wanted))
            else:
                taken.add(pos)
                results.append(DeviceResult(device.index, {}))
            break
        else:
            return None  # one request, no constraints: a greedy miss means no solution
    return results


# --- Tessera's slice and claims ----------------------------------------------------------------
def gpu_device(gpu: GpuState, multiple: bool) -> Device:
    """The device `slices.device_entry` publishes for this GPU, with what the GPU holds."""
    capacity: dict[str, Capacity] = {
        DRA_CAPACITY_CORES: Capacity(CORE_PER_GPU, RequestPolicy(CORE_PER_GPU, 1, 1, CORE_PER_GPU)),
    }
    consumed = {DRA_CAPACITY_CORES: -(-gpu.used_milli // MILLI_PER_CORE)}
    if gpu.memory_mib < UNTRACKED_MEMORY:
        capacity[DRA_CAPACITY_MEMORY] = Capacity(gpu.memory_mib, RequestPolicy(gpu.memory_mib, 1, 1))
        consumed[DRA_CAPACITY_MEMORY] = gpu.used_memory_mib
    return Device(f"gpu-{gpu.index}", gpu.index, gpu.model, capacity, multiple, consumed, in_use=not gpu.idle)


def node_devices(node: NodeState, consumable_capacity: bool = True) -> list[Device]:
    """The node's slice: its healthy GPUs in the order the plugin lists them for the pool's
    placement (`dra_device_order`; the pool default binpack when the node has no label), by the
    cores each holds now. `consumable_capacity=False`: the DRAConsumableCapacity gate off (1.34's
    default), every device allocated whole."""
    multiple = consumable_capacity and node.max_shares_per_gpu != 1
    devices = {g.index: gpu_device(g, multiple) for g in node.gpus if g.healthy}
    used = {i: d.consumed[DRA_CAPACITY_CORES] for i, d in devices.items()}
    return [devices[i] for i in dra_device_order(used, node.gpu_placement or DEFAULT_POOL_POLICY.placement)]


def claim_request(container: ContainerRequest, models: frozenset[str] | None = None) -> DeviceRequest:
    """The request Tessera's claim template makes for a container (`claim_template`)."""
    if container.whole:
        requests = {DRA_CAPACITY_CORES: CORE_PER_GPU}
    else:
        requests = {DRA_CAPACITY_CORES: container.gpu_core}
    if container.gpu_memory_mib is not None:
        requests[DRA_CAPACITY_MEMORY] = container.gpu_memory_mib
    return DeviceRequest(container.gpu_count, requests, models)


def grant_milli(result: DeviceResult) -> int:
    """Compute a result takes, in milli-GPUs: its consumed cores, or the whole device."""
    cores = result.consumed.get(DRA_CAPACITY_CORES)
    return MILLI_PER_GPU if cores is None else cores * MILLI_PER_CORE
