"""This node's ResourceSlice: the builder (pure) and the publisher (through `KubeApi`).

Shape (resource.k8s.io/v1, staging/src/k8s.io/api/resource/v1/types.go `ResourceSliceSpec`,
`Device`, `DeviceCapacity`, `CapacityRequestPolicy`): one slice per node, driver
`gpu.tessera.dev`, pool named after the node (`spec.pool{name, generation, resourceSliceCount: 1}`,
the generation raised whenever the device list changes so the scheduler drops the old one),
`spec.nodeName`, and one device per healthy GPU that is not in MIG mode, in the order the pool's
`placement` wants kube-scheduler's first fit to meet them (`contract.dra_device_order`: fullest
first for binpack, emptiest first for spread, by the cores of the claims prepared here):

    name: gpu-<index>
    attributes: model, uuid, index (int), pool, sharingPolicy, onlineOffline (bool)
    capacity:
      cores:  {value: "100", requestPolicy: {default: "100", validRange: {min: "1", max: "100", step: "1"}}}
      memory: {value: "<MiB>Mi", requestPolicy: {default: "<MiB>Mi", validRange: {min: "1Mi", step: "1Mi"}}}
    allowMultipleAllocations: true   (where the pool shares a GPU among several claims)

A claim that asks for no capacity consumes the defaults (the whole GPU); one that asks for
`cores: 30, memory: 4Gi` consumes those (KEP-5075). `allowMultipleAllocations` and `requestPolicy`
are behind the `DRAConsumableCapacity` gate (alpha, off by default, in 1.34; beta, on, from 1.36):
an API server with the gate off drops them, and the devices are then allocated whole; the plugin
serves both (see `core`).

Publishing follows kubelet's expectations (k8s.io/dynamic-resource-allocation resourceslice
controller): the slice is created with `generateName: <node>-gpu.tessera.dev-`, replaced with the
resourceVersion it was read at when the devices change (409: read again and retry), and extra
slices of this node and driver are deleted.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tessera.kube.api import Conflict, KubeApi, KubeApiError, KubeObject, NotFound
from tessera.model.contract import CORE_PER_GPU, DRA_CAPACITY_CORES, DRA_CAPACITY_MEMORY, DRA_DRIVER, LABEL_POOL, NodeGpu, dra_device_order
from tessera.model.pool_policy import PoolPolicy
from tessera_node.dra.core import device_name, memory_quantity

log = logging.getLogger("tessera.dra")
API_VERSION: Final = "resource.k8s.io/v1"
MAX_ATTRIBUTE_STRING: Final = 64  # resource/v1 DeviceAttributeMaxValueLength


def _string(value: str) -> dict[str, str]:
    return {"string": value[:MAX_ATTRIBUTE_STRING]}


def device_entry(gpu: NodeGpu, policy: PoolPolicy, pool_label: str) -> dict[str, Any]:
    memory = memory_quantity(gpu.memory_mib)
    device: dict[str, Any] = {
        "name": device_name(gpu.index),
        "attributes": {
            "model": _string(gpu.model),
            "uuid": _string(gpu.uuid),
            "index": {"int": gpu.index},
            "pool": _string(pool_label),
            "sharingPolicy": _string(policy.sharing),
            "onlineOffline": {"bool": policy.online_offline},
        },
        "capacity": {
            DRA_CAPACITY_CORES: {
                "value": str(CORE_PER_GPU),
                "requestPolicy": {"default": str(CORE_PER_GPU), "validRange": {"min": "1", "max": str(CORE_PER_GPU), "step": "1"}},
            },
            DRA_CAPACITY_MEMORY: {"value": memory, "requestPolicy": {"default": memory, "validRange": {"min": "1Mi", "step": "1Mi"}}},
        },
    }
    if policy.shares_per_gpu != 1:
        device["allowMultipleAllocations"] = True
    return device


def slice_spec(
    node_name: str, gpus: Sequence[NodeGpu], policy: PoolPolicy, node_labels: Mapping[str, str], generation: int,
    used_cores: Mapping[int, int] | None = None,
) -> dict[str, Any]:
    """`used_cores`: per GPU index, the cores its prepared claims hold (none: all idle)."""
    pool_label = node_labels.get(LABEL_POOL, "")
    healthy = {g.index: g for g in gpus if g.healthy}
    order = dra_device_order({i: (used_cores or {}).get(i, 0) for i in healthy}, policy.placement)
    return {
        "driver": DRA_DRIVER,
        "nodeName": node_name,
        "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
        "devices": [device_entry(healthy[i], policy, pool_label) for i in order],
    }


def slice_body(node_name: str, spec: Mapping[str, Any], *, name: str | None = None, resource_version: str | None = None) -> KubeObject:
    meta: dict[str, Any] = {"name": name} if name else {"generateName": f"{node_name}-{DRA_DRIVER}-"}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": meta, "spec": dict(spec)}


def _devices_of(body: Mapping[str, Any]) -> Any:
    return (body.get("spec") or {}).get("devices")


class SlicePublisher:
    """Keeps this node's one ResourceSlice equal to what `publish` was last given."""

    def __init__(self, kube: KubeApi, node_name: str) -> None:
        self._kube = kube
        self._node = node_name
        self.writes = 0
        # (slice name, devices) last written: an API server with DRAConsumableCapacity off stores
        # the devices without the gated fields, which must not read as a change every time
        self._sent: tuple[str, Any] | None = None

    def publish(
        self, gpus: Sequence[NodeGpu], policy: PoolPolicy, node_labels: Mapping[str, str], used_cores: Mapping[int, int] | None = None,
        *, attempts: int = 3,
    ) -> KubeObject | None:
        """Create or update the slice; None when the API server could not be written (logged)."""
        for _ in range(attempts):
            try:
                return self._publish_once(gpus, policy, node_labels, used_cores)
            except (Conflict, NotFound) as exc:
                log.info("ResourceSlice of %s changed meanwhile (%s); reading it again", self._node, exc)
            except KubeApiError as exc:
                log.warning("cannot publish the ResourceSlice of %s: %s", self._node, exc)
                return None
        log.warning("cannot publish the ResourceSlice of %s: it kept changing", self._node)
        return None

    def _publish_once(self, gpus: Sequence[NodeGpu], policy: PoolPolicy, node_labels: Mapping[str, str], used_cores: Mapping[int, int] | None) -> KubeObject:
        mine = sorted(self._kube.list_resource_slices(node_name=self._node, driver=DRA_DRIVER), key=lambda s: s["metadata"]["name"])
        for extra in mine[1:]:
            self._kube.delete_resource_slice(extra["metadata"]["name"])
        current = mine[0] if mine else None
        generation = int(((current or {}).get("spec") or {}).get("pool", {}).get("generation", 0))
        wanted = slice_spec(self._node, gpus, policy, node_labels, generation or 1, used_cores)
        if current is not None and (_devices_of(current) == wanted["devices"] or self._sent == (current["metadata"]["name"], wanted["devices"])):
            return current
        if current is None:
            self.writes += 1
            written = self._kube.create_resource_slice(slice_body(self._node, wanted))
        else:
            wanted["pool"]["generation"] = generation + 1
            meta = current["metadata"]
            self.writes += 1
            written = self._kube.replace_resource_slice(meta["name"], slice_body(self._node, wanted, name=meta["name"], resource_version=meta.get("resourceVersion")))
        self._sent = (written["metadata"]["name"], wanted["devices"])
        return written

    def withdraw(self) -> None:
        """Delete this node's slices (the plugin is going away for good)."""
        try:
            for body in self._kube.list_resource_slices(node_name=self._node, driver=DRA_DRIVER):
                self._kube.delete_resource_slice(body["metadata"]["name"])
        except KubeApiError as exc:
            log.warning("cannot delete the ResourceSlices of %s: %s", self._node, exc)
