"""Pure logic of the DRA kubelet plugin: from an allocated ResourceClaim to the GPU shares it
grants on this node, and from the pods that reserved it to the containers the agent must enforce.
No I/O here; `plugin.py` reads the claim and the pods, then calls these.

A claim's allocation is kube-scheduler's (resource.k8s.io/v1 `ResourceClaim.status.allocation`,
staging/src/k8s.io/api/resource/v1/types.go `DeviceRequestAllocationResult`): per device one result
{request, driver, pool, device, shareID?, consumedCapacity?}. The plugin trusts the scheduler for
the sum over claims (no GPU over 100 cores); it refuses a result it cannot serve: a device that is
not on this node, a consumed capacity over the device's own.

Consumable capacity (KEP-5075, gate `DRAConsumableCapacity`: alpha, default off, in 1.34; beta,
default on, from 1.36). With the gate on, a result on a shared device carries `consumedCapacity`
{cores, memory}: that is the share. With it off (a 1.34 cluster with default gates) the API
server drops `allowMultipleAllocations` from the slice, each device is allocated whole and the
result carries no `consumedCapacity`: the share is the whole GPU (100 cores, all its memory).

Container identity. NodePrepareResources is per claim: kubelet names the claim, not a container.
The agent enforces per container (`tessera_node.registry`, keyed by pod UID and container name).
So the plugin reads `status.reservedFor` (the pods the claim is reserved for; kube-scheduler adds
the pod before binding), and in each such pod the containers whose `resources.claims` name the
pod's entry in `spec.resourceClaims` that resolves to this claim (directly by
`resourceClaimName`, or for a template through `status.resourceClaimStatuses`). Each such
container holds every share of the claim, whichever of its requests it names: the claim has one
CDI device carrying the env of all its shares (kubelet hands a container the CDI ids of the
devices of the requests it names, pkg/kubelet/cm/dra/claiminfo.go `cdiDevicesAsList`, without
removing duplicates; so the id goes on one device, associated with every request), and the
registry must agree with that env. Each such container is registered, and unregistered at
unprepare. One Tessera claim per container: a container that names two claims of this driver
would need its shares merged across claims, which is refused with a clear error instead.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any, Final

from tessera.model.contract import ANNOTATION_APP_CLASS, CORE_PER_GPU, DRA_CAPACITY_CORES, DRA_CAPACITY_MEMORY, DRA_DRIVER, GpuShare, NodeGpu
from tessera.model.pool_policy import PoolPolicy
from tessera.model.quantity import parse_quantity
from tessera_node.registry import AppClass, ContainerKey, ContainerName, PodUid, RegisteredContainer

_DEVICE: Final = re.compile(r"^gpu-(?P<index>\d{1,3})$")
_MIB: Final = Decimal(2) ** 20


class ClaimError(ValueError):
    """This claim cannot be prepared on this node; the message says why, naming the claim."""


def device_name(index: int) -> str:
    """The device name of GPU `index` in this node's ResourceSlice (a DNS label)."""
    return f"gpu-{index}"


def device_index(name: str) -> int | None:
    match = _DEVICE.match(name)
    return int(match.group("index")) if match else None


def memory_quantity(mib: int) -> str:
    return f"{mib}Mi"


@dataclass(frozen=True)
class ClaimRef:
    """A claim as kubelet names it in NodePrepareResources / NodeUnprepareResources."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"

    def problems(self) -> list[str]:
        """What the request left out (the proto marks all three REQUIRED)."""
        return [f"claim {field} is empty" for field in ("namespace", "name", "uid") if not getattr(self, field)]


@dataclass(frozen=True)
class PreparedDevice:
    """One allocated device of a claim and the share it grants."""

    request: str
    pool: str
    device: str
    share: GpuShare
    share_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request, "pool": self.pool, "device": self.device, "share": self.share.to_json(), "shareID": self.share_id}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> PreparedDevice:
        return PreparedDevice(str(data["request"]), str(data["pool"]), str(data["device"]), GpuShare.from_json(dict(data["share"])), data.get("shareID"))


@dataclass(frozen=True)
class PreparedClaim:
    """What prepare did for one claim: kept in the checkpoint, undone by unprepare."""

    claim: ClaimRef
    devices: tuple[PreparedDevice, ...]
    cdi_device_id: str
    containers: tuple[RegisteredContainer, ...]  # what was registered for the agent, restored after a restart

    @property
    def shares(self) -> tuple[GpuShare, ...]:
        return merge_shares(d.share for d in self.devices)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.claim.namespace,
            "name": self.claim.name,
            "uid": self.claim.uid,
            "devices": [d.to_json() for d in self.devices],
            "cdiDeviceID": self.cdi_device_id,
            "containers": [c.to_json() for c in self.containers],
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> PreparedClaim:
        return PreparedClaim(
            ClaimRef(str(data["namespace"]), str(data["name"]), str(data["uid"])),
            tuple(PreparedDevice.from_json(d) for d in data["devices"]),
            str(data["cdiDeviceID"]),
            tuple(RegisteredContainer.from_json(c) for c in data["containers"]),
        )


def merge_shares(shares: Iterable[GpuShare]) -> tuple[GpuShare, ...]:
    """One share per GPU (two requests of a claim on one GPU add up), in GPU order."""
    by_gpu: dict[int, GpuShare] = {}
    for share in shares:
        old = by_gpu.get(share.index)
        by_gpu[share.index] = share if old is None else GpuShare(share.index, share.uuid, min(CORE_PER_GPU, old.core + share.core), old.memory_mib + share.memory_mib)
    return tuple(by_gpu[i] for i in sorted(by_gpu))


def _share(claim: ClaimRef, result: Mapping[str, Any], gpu: NodeGpu) -> GpuShare:
    consumed = result.get("consumedCapacity")
    if consumed is None:  # allocated whole: no consumable capacity (1.34 default gates)
        return GpuShare(gpu.index, gpu.uuid, CORE_PER_GPU, gpu.memory_mib)
    if not isinstance(consumed, Mapping):
        raise ClaimError(f"claim {claim}: device {result.get('device')}: consumedCapacity is not an object")
    unknown = sorted(set(consumed) - {DRA_CAPACITY_CORES, DRA_CAPACITY_MEMORY})
    if unknown:
        raise ClaimError(f"claim {claim}: device {result.get('device')}: unknown capacity {', '.join(unknown)} (this driver has {DRA_CAPACITY_CORES}, {DRA_CAPACITY_MEMORY})")
    try:
        cores = parse_quantity(consumed.get(DRA_CAPACITY_CORES, CORE_PER_GPU))
        memory = parse_quantity(consumed.get(DRA_CAPACITY_MEMORY, f"{gpu.memory_mib}Mi"))
    except ValueError as exc:
        raise ClaimError(f"claim {claim}: device {result.get('device')}: consumedCapacity: {exc}") from None
    if cores != cores.to_integral_value() or not 1 <= cores <= CORE_PER_GPU:
        raise ClaimError(f"claim {claim}: device {result.get('device')}: consumes {cores} {DRA_CAPACITY_CORES}; the device has {CORE_PER_GPU} (whole numbers 1..{CORE_PER_GPU})")
    mib = int((memory / _MIB).to_integral_value(rounding=ROUND_CEILING))  # whole MiB, rounded up
    if memory < 0 or mib > gpu.memory_mib:
        raise ClaimError(f"claim {claim}: device {result.get('device')}: consumes {consumed.get(DRA_CAPACITY_MEMORY)} of {DRA_CAPACITY_MEMORY}; the device has {gpu.memory_mib}Mi")
    return GpuShare(gpu.index, gpu.uuid, int(cores), mib)


def allocated_devices(claim: ClaimRef, body: Mapping[str, Any], *, pool: str, gpus: Sequence[NodeGpu], driver: str = DRA_DRIVER) -> tuple[PreparedDevice, ...]:
    """The devices of `driver` the claim `body` was allocated on this node's `pool`, with their shares.

    Raises `ClaimError` for a claim that is not the one kubelet named (UID), not allocated, has no
    device of this driver, or names a device this node does not have or capacity over a device's."""
    meta = body.get("metadata") or {}
    if str(meta.get("uid", "")) != claim.uid:
        raise ClaimError(f"claim {claim}: the API server has {claim.namespace}/{claim.name} with uid {meta.get('uid')!r}: the claim was replaced")
    allocation = (body.get("status") or {}).get("allocation")
    if not isinstance(allocation, Mapping):
        raise ClaimError(f"claim {claim}: not allocated (no status.allocation)")
    results = ((allocation.get("devices") or {}).get("results")) or []
    if not isinstance(results, list):
        raise ClaimError(f"claim {claim}: status.allocation.devices.results is not a list")
    by_index = {g.index: g for g in gpus}
    out: list[PreparedDevice] = []
    for result in results:
        if not isinstance(result, Mapping) or result.get("driver") != driver:
            continue
        name = str(result.get("device", ""))
        if result.get("pool") != pool:
            raise ClaimError(f"claim {claim}: device {name} is in pool {result.get('pool')!r}, not this node's pool {pool!r}")
        index = device_index(name)
        gpu = by_index.get(index) if index is not None else None
        if gpu is None:
            have = ", ".join(device_name(g.index) for g in gpus) or "none"
            raise ClaimError(f"claim {claim}: device {name!r} is not on this node (it has {have})")
        share_id = result.get("shareID")
        out.append(PreparedDevice(str(result.get("request", "")), pool, name, _share(claim, result, gpu), str(share_id) if share_id else None))
    if not out:
        raise ClaimError(f"claim {claim}: no device of driver {driver} in its allocation")
    return tuple(out)


def reserving_pod_uids(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(pod name, pod uid) of every pod the claim is reserved for (`status.reservedFor`)."""
    out = []
    for consumer in (body.get("status") or {}).get("reservedFor") or []:
        if isinstance(consumer, Mapping) and consumer.get("resource") == "pods" and not consumer.get("apiGroup"):
            out.append((str(consumer.get("name", "")), str(consumer.get("uid", ""))))
    return out


def _pod_claim_entries(pod: Mapping[str, Any], claim_name: str) -> set[str]:
    """Names of the pod's `spec.resourceClaims` entries that resolve to the claim `claim_name`."""
    spec = pod.get("spec") or {}
    generated = {str(s.get("name")): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or [] if isinstance(s, Mapping)}
    out: set[str] = set()
    for entry in spec.get("resourceClaims") or []:
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("name", ""))
        resolved = entry.get("resourceClaimName") or generated.get(name)
        if resolved == claim_name:
            out.add(name)
    return out


def consumers(
    claim: ClaimRef, devices: Sequence[PreparedDevice], pods: Iterable[Mapping[str, Any]], policy: PoolPolicy
) -> list[RegisteredContainer]:
    """Registry records of the containers of `pods` that use the claim, with their shares."""
    out: list[RegisteredContainer] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        entries = _pod_claim_entries(pod, claim.name)
        if not entries:
            continue
        annotations = meta.get("annotations") or {}
        app = annotations.get(ANNOTATION_APP_CLASS)
        app_class = AppClass(app) if app in ("online", "offline") else None
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            refs = [r for r in ((container.get("resources") or {}).get("claims") or []) if isinstance(r, Mapping) and r.get("name") in entries]
            if not refs:
                continue
            out.append(
                RegisteredContainer(
                    pod_uid=PodUid(str(meta.get("uid", ""))),
                    namespace=str(meta.get("namespace", claim.namespace)),
                    pod_name=str(meta.get("name", "")),
                    container=ContainerName(str(container.get("name", ""))),
                    shares=merge_shares(d.share for d in devices),
                    app_class=app_class,
                    policy=policy,
                )
            )
    return out


class PreparedSet:
    """The prepared claims by UID: idempotent prepare and unprepare bookkeeping (not thread-safe;
    the plugin holds its lock)."""

    def __init__(self, claims: Iterable[PreparedClaim] = ()) -> None:
        self._claims = {c.claim.uid: c for c in claims}

    def get(self, uid: str) -> PreparedClaim | None:
        return self._claims.get(uid)

    def add(self, prepared: PreparedClaim) -> None:
        self._claims[prepared.claim.uid] = prepared

    def remove(self, uid: str) -> PreparedClaim | None:
        return self._claims.pop(uid, None)

    def all(self) -> list[PreparedClaim]:
        return [self._claims[u] for u in sorted(self._claims)]

    def holder_of(self, key: ContainerKey, *, other_than: str) -> PreparedClaim | None:
        """The prepared claim other than `other_than` that already registered container `key`."""
        return next((c for u, c in self._claims.items() if u != other_than and any(r.key == key for r in c.containers)), None)
