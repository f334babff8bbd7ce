"""ResourceClaims and pods as kube-scheduler leaves them for a DRA driver: allocated and reserved.

The shapes are resource.k8s.io/v1 (staging/src/k8s.io/api/resource/v1/types.go): a claim's
`status.allocation.devices.results[]` entry per device {request, driver, pool, device} and, with
the `DRAConsumableCapacity` gate on (1.36 default), `shareID` and `consumedCapacity`; its
`status.reservedFor[]` {resource: "pods", name, uid}; and core/v1 pods that reference the claim in
`spec.resourceClaims[]` {name, resourceClaimName} and in a container's `resources.claims[]`
{name, request?}.
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tessera.model.contract import DRA_CAPACITY_CORES, DRA_CAPACITY_MEMORY, DRA_DRIVER


@dataclass(frozen=True)
class Grant:
    """One device of an allocation: GPU `index` of `node`, `cores` percent and `memory_mib`."""

    node: str
    index: int
    cores: int
    memory_mib: int
    request: str = "gpu"


def allocated_claim(
    namespace: str, name: str, grants: Sequence[Grant], *, pods: Sequence[tuple[str, str]] = (), consumable_capacity: bool = True, uid: str | None = None
) -> dict[str, Any]:
    """A claim allocated on `grants` and reserved for `pods` ((name, uid) pairs). With
    `consumable_capacity` off (1.34 default gates) results carry no share, as the scheduler then
    allocates devices whole."""
    results = []
    for grant in grants:
        result: dict[str, Any] = {"request": grant.request, "driver": DRA_DRIVER, "pool": grant.node, "device": f"gpu-{grant.index}"}
        if consumable_capacity:
            result["shareID"] = str(uuid.uuid4())
            result["consumedCapacity"] = {DRA_CAPACITY_CORES: str(grant.cores), DRA_CAPACITY_MEMORY: f"{grant.memory_mib}Mi"}
        results.append(result)
    node = grants[0].node if grants else ""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": [{"name": r, "exactly": {"deviceClassName": DRA_DRIVER}} for r in dict.fromkeys(g.request for g in grants)]}},
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid} for pod, pod_uid in pods],
        },
    }


def pod_using_claim(namespace: str, name: str, claim_name: str, node: str, *, containers: Sequence[str] = ("main",), app_class: str | None = None) -> dict[str, Any]:
    """A pod bound to `node` whose `containers` use the claim `claim_name` (entry name "gpu")."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if app_class:
        meta["annotations"] = {"tessera.dev/app-class": app_class}
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
            "containers": [{"name": c, "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}} for c in containers],
        },
        "status": {"phase": "Pending"},
    }
