"""Stand-in for the control plane path a pod takes before it reaches the node: the real webhook
mutation, the real allocation model choosing GPUs, the real allocation record and ConfigMap
builders, then a Binding. Tests and benchmarks use it so the device plugin is exercised with
exactly the objects production writes.

It lives with the tests (tests/support/, on pytest's `pythonpath`; bench/device_plugin.py puts it on
sys.path) because it composes the control plane's packages, which the node side may not import.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from tessera.alloc import Cluster, node_state_from_k8s, pod_request_from_k8s
from tessera.model.contract import ANNOTATION_APP_CLASS, GPU_CORE, GPU_MEMORY, NodeGpu
from tessera.kube.fake import FakeKubeApi
from tessera.model.allocation_record import configmap_body, configmap_data, configmap_name
from tessera.webhook.admission import mutate_pod
from tessera.webhook.settings import WebhookSettings

ContainerAsk = tuple[int, int | None]  # (gpu-core percent, gpu-memory MiB or None)


class NoRoom(Exception):
    """The pod does not fit the node's free GPU capacity."""


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_json_patch(obj: dict[str, Any], patch: Any) -> None:
    """The `add` operations the webhook emits (enough JSON Patch for its output)."""
    for op in patch:
        if op["op"] != "add":
            raise ValueError(f"unsupported JSON patch op {op['op']!r}")
        parts = [_unescape(p) for p in op["path"].split("/")[1:]]
        target: Any = obj
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        last = parts[-1]
        if isinstance(target, list):
            target.insert(len(target) if last == "-" else int(last), op["value"])
        else:
            target[last] = op["value"]


class ExtenderStandIn:
    """Admits, places and binds pods onto one node of a `FakeKubeApi`. Thread-safe."""

    def __init__(self, kube: FakeKubeApi, node_name: str) -> None:
        self._kube = kube
        self._node = node_name
        self._lock = threading.Lock()
        state = node_state_from_k8s(kube.get_node(node_name))
        if state is None:
            raise ValueError(f"node {node_name} has no tessera.dev/gpus annotation yet; start the device plugin first")
        self._gpus = {g.index: NodeGpu(g.index, g.uuid, g.model, g.memory_mib, g.healthy) for g in state.gpus}
        self._cluster = Cluster([state])

    def create_and_bind(
        self, name: str, containers: Mapping[str, ContainerAsk], *, namespace: str = "default", app_class: str | None = None
    ) -> dict[str, Any]:
        """Create the pod as a user would, let the webhook mutate it, place and bind it."""
        specs = []
        for cname, (core, memory) in containers.items():
            limits = {GPU_CORE: str(core)}
            if memory is not None:
                limits[GPU_MEMORY] = str(memory)
            specs.append({"name": cname, "image": "cuda:12", "resources": {"limits": limits}, "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})
        pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "annotations": {}}, "spec": {"containers": specs}}
        if app_class:
            pod["metadata"]["annotations"][ANNOTATION_APP_CLASS] = app_class
        mutation = mutate_pod(pod, request_uid=str(uuid.uuid4()), settings=WebhookSettings(), namespace_opted_in=False)
        apply_json_patch(pod, mutation.patch)
        with self._lock:
            created = self._kube.create_pod(pod)
            request = pod_request_from_k8s(created)
            placement = self._cluster.place(request, self._node)
            if placement is None:
                self._kube.delete_pod(namespace, name)
                raise NoRoom(f"pod {namespace}/{name} does not fit node {self._node}")
            self._cluster.reserve(request, placement)
            allocation = self._cluster.to_allocation(placement, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            cm = configmap_name(created)
            self._kube.create_configmap(namespace, configmap_body(created, cm, configmap_data(allocation, {i: g.memory_mib for i, g in self._gpus.items()})))
            self._kube.patch_pod_annotations(namespace, name, allocation.pod_annotations())
            self._kube.bind_pod(namespace, name, created["metadata"]["uid"], self._node)
        return self._kube.get_pod(namespace, name)

    def release(self, pod: Mapping[str, Any]) -> None:
        with self._lock:
            self._cluster.release(pod["metadata"]["uid"])
