"""resource.k8s.io/v1 ResourceSlices and ResourceClaims of `FakeKubeApi`, kept as the API server keeps them.

ResourceSlices (cluster-scoped):
- create: `metadata.generateName` without a name gets the name `<generateName><5 random characters>`
  (k8s.io/apiserver pkg/storage/names/generate.go `SimpleNameGenerator`: the base cut to 58
  characters, then five of "bcdfghjklmnpqrstvwxz2456789"); a taken name is 409 AlreadyExists; no
  name and no generateName is 422 (`ValidateObjectMeta`).
- replace (PUT): 404 for a missing slice (the ResourceSlice strategy does not create on update);
  a `metadata.resourceVersion` that is not the stored one is 409 Conflict (store.go
  `OPTIMISTIC_LOCK`); without one the update is unconditional (kubernetes/kubernetes
  pkg/registry/resource/resourceslice/strategy.go `AllowUnconditionalUpdate` true). uid and
  creationTimestamp are kept; `metadata.generation` starts at 1 and grows when the spec changes
  (the strategy's `PrepareForUpdate`).
- list: field selectors `spec.nodeName` and `spec.driver` (resource/v1 `ResourceSliceSelectorNodeName`,
  `ResourceSliceSelectorDriver`, which kubelet's DRA plugin manager uses to wipe a node's slices:
  pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go `wipeResourceSlices`).
- validation (pkg/apis/resource/validation/validation.go `ValidateResourceSlice`), the subset a
  driver can get wrong: spec.driver and spec.pool.name required, exactly one of nodeName / allNodes
  / nodeSelector / perDeviceNodeSelection, at most 128 devices, device names DNS labels, unique;
  each error a 422 naming its field.
- the `DRAConsumableCapacity` feature gate (pkg/features/kube_features.go: alpha, default off, in
  1.34; beta, default on, from 1.36): with it off the strategy drops the fields it guards
  (`dropDisabledFields`): a device's `allowMultipleAllocations` and its capacities'
  `requestPolicy`. `FakeKubeApi(dra_consumable_capacity=False)` is a 1.34 API server with default
  gates.

Both kinds are watched as pods and nodes are (`fake_watch`): ADDED, MODIFIED, DELETED with the
object's new resourceVersion; a slice watch takes the `spec.driver` field selector.

ResourceClaims (namespaced): `list_resource_claims` lists every namespace's; `get_resource_claim` answers 404 `resourceclaims.resource.k8s.io "NAME"
not found`; tests put claims in place with `put_resource_claim` (the scheduler's allocation in
`status.allocation`, as kube-scheduler writes it).
"""
from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any, Final

from tessera.kube.api import KubeObject
from tessera.kube.fake_status import FieldError, GroupResource, already_exists, bad_request, invalid, not_found, stale

RESOURCE_SLICES: Final = GroupResource("resource.k8s.io", "resourceslices")
RESOURCE_CLAIMS: Final = GroupResource("resource.k8s.io", "resourceclaims")
MAX_DEVICES_PER_SLICE: Final = 128  # resource/v1 ResourceSliceMaxDevices
_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"  # names/generate.go alphanums
_MAX_GENERATE_BASE: Final = 63 - 5
_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NODE_SCOPES: Final = ("nodeName", "allNodes", "nodeSelector", "perDeviceNodeSelection")


def generate_name(base: str, rng: random.Random) -> str:
    return base[:_MAX_GENERATE_BASE] + "".join(rng.choice(_NAME_ALPHABET) for _ in range(5))


def _slice_errors(spec: Any) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [FieldError("spec", "Required value", "", cause_type="FieldValueRequired")]
    errors: list[FieldError] = []
    if not spec.get("driver"):
        errors.append(FieldError("spec.driver", "Required value", "", cause_type="FieldValueRequired"))
    if not (spec.get("pool") or {}).get("name"):
        errors.append(FieldError("spec.pool.name", "Required value", "", cause_type="FieldValueRequired"))
    scopes = [k for k in _NODE_SCOPES if spec.get(k)]
    if len(scopes) != 1:
        errors.append(FieldError("spec", "Invalid value", f"exactly one of `{'`, `'.join(_NODE_SCOPES)}` is required", "{...}"))
    devices = spec.get("devices") or []
    if len(devices) > MAX_DEVICES_PER_SLICE:
        errors.append(FieldError("spec.devices", "Invalid value", f"must have at most {MAX_DEVICES_PER_SLICE} items", str(len(devices))))
    seen: set[str] = set()
    for i, device in enumerate(devices):
        name = device.get("name") if isinstance(device, dict) else None
        if not isinstance(name, str) or not _DNS_LABEL.match(name) or len(name) > 63:
            errors.append(FieldError(f"spec.devices[{i}].name", "Invalid value", "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'", f'"{name}"'))
        elif name in seen:
            errors.append(FieldError(f"spec.devices[{i}].name", "Invalid value", "duplicate device name", f'"{name}"'))
        else:
            seen.add(name)
    return errors


def _drop_consumable_capacity(spec: dict[str, Any]) -> None:
    for device in spec.get("devices") or []:
        if isinstance(device, dict):
            device.pop("allowMultipleAllocations", None)
            for capacity in (device.get("capacity") or {}).values():
                if isinstance(capacity, dict):
                    capacity.pop("requestPolicy", None)


class ResourceSliceTable:
    """Not locked: `FakeKubeApi` calls it under its lock, hands out copies and passes `bump`."""

    def __init__(self, bump: Any, *, consumable_capacity: bool = True, seed: int = 0) -> None:
        self._bump = bump
        self._slices: dict[str, KubeObject] = {}
        self._rng = random.Random(seed)
        self.consumable_capacity = consumable_capacity

    def _admit(self, body: KubeObject, name: str) -> None:
        spec = body.get("spec")
        errors = _slice_errors(spec)
        if errors:
            raise invalid("ResourceSlice", "resource.k8s.io", name, errors)
        if not self.consumable_capacity and isinstance(spec, dict):
            _drop_consumable_capacity(spec)

    def create(self, body: KubeObject, uid: str, created: str) -> KubeObject:
        meta: dict[str, Any] = body.setdefault("metadata", {})
        if not meta.get("name"):
            base = meta.get("generateName")
            if not base:
                raise invalid("ResourceSlice", "resource.k8s.io", "", [FieldError("metadata.name", "Required value", "name or generateName is required", cause_type="FieldValueRequired")])
            meta["name"] = generate_name(str(base), self._rng)
        name = str(meta["name"])
        if name in self._slices:
            raise already_exists(RESOURCE_SLICES, name)
        self._admit(body, name)
        meta.update({"uid": uid, "creationTimestamp": created, "generation": 1})
        meta.pop("resourceVersion", None)
        body.setdefault("apiVersion", "resource.k8s.io/v1")
        body.setdefault("kind", "ResourceSlice")
        self._bump(body)
        self._slices[name] = body
        return body

    def replace(self, name: str, body: KubeObject) -> KubeObject:
        meta: dict[str, Any] = body.setdefault("metadata", {})
        sent = meta.get("name")
        if sent is not None and sent != name:
            raise bad_request(f"the name of the object ({sent}) does not match the name on the URL ({name})")
        old = self._slices.get(name)
        if old is None:
            raise not_found(RESOURCE_SLICES, name)
        wanted = meta.get("resourceVersion")
        if wanted and wanted != "0" and wanted != old["metadata"]["resourceVersion"]:
            raise stale(RESOURCE_SLICES, name)
        self._admit(body, name)
        generation = int(old["metadata"].get("generation", 1))
        if body.get("spec") != old.get("spec"):
            generation += 1
        meta.update({"name": name, "uid": old["metadata"]["uid"], "creationTimestamp": old["metadata"].get("creationTimestamp"), "generation": generation})
        self._bump(body)
        self._slices[name] = body
        return body

    def delete(self, name: str) -> KubeObject:
        body = self._slices.pop(name, None)
        if body is None:
            raise not_found(RESOURCE_SLICES, name)
        return body

    def select(self, node_name: str | None, driver: str | None) -> Iterator[KubeObject]:
        for body in self._slices.values():
            spec = body.get("spec") or {}
            if node_name is not None and spec.get("nodeName") != node_name:
                continue
            if driver is not None and spec.get("driver") != driver:
                continue
            yield body


class ResourceClaimTable:
    def __init__(self, bump: Any) -> None:
        self._bump = bump
        self._claims: dict[tuple[str, str], KubeObject] = {}

    def put(self, body: KubeObject, uid: str, created: str) -> KubeObject:
        meta: dict[str, Any] = body.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", uid)
        meta.setdefault("creationTimestamp", created)
        body.setdefault("apiVersion", "resource.k8s.io/v1")
        body.setdefault("kind", "ResourceClaim")
        self._bump(body)
        self._claims[(meta["namespace"], meta["name"])] = body
        return body

    def get(self, namespace: str, name: str) -> KubeObject:
        claim = self._claims.get((namespace, name))
        if claim is None:
            raise not_found(RESOURCE_CLAIMS, name)
        return claim

    def has(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._claims

    def all(self) -> list[KubeObject]:
        return list(self._claims.values())

    def delete(self, namespace: str, name: str) -> KubeObject:
        body = self._claims.pop((namespace, name), None)
        if body is None:
            raise not_found(RESOURCE_CLAIMS, name)
        return body
