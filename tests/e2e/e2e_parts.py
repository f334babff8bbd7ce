"""Small doubles and builders shared by the end-to-end harness: what kubelet and kubectl would
write, a recorder at the `KubeApi` seam, and the pods of seed 000's Jobs."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tessera.model.contract import GPU_CORE, GPU_MEMORY, NVIDIA_GPU
from tessera.kube.fake import FakeKubeApi

KubeObject = dict[str, Any]
EXTENDED = (GPU_CORE, GPU_MEMORY, NVIDIA_GPU)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@dataclass
class ManualClock:
    now: float

    def __call__(self) -> float:
        return self.now


class RecordingApi:
    """Passes every call through and remembers the `KubeApi` methods a component used, so a test
    can check the rendered RBAC grants exactly what the component does."""

    def __init__(self, api: Any, calls: set[str]) -> None:
        self._api = api
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._api, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls.add(name)
            return target(*args, **kwargs)

        return call


class KubeletPodStatus:
    """The API as the node agent reads it: pods carry `status.containerStatuses[].containerID`,
    which kubelet writes once a container runs (FakeKubeApi has no pod-status write, so the
    harness adds what kubelet would have written). Everything else goes to the API unchanged."""

    def __init__(self, api: FakeKubeApi, container_ids: Mapping[str, Mapping[str, str]]) -> None:
        self._api = api
        self._ids = container_ids

    def list_pods(self, *, node_name: str | None = None, label_selector: str | None = None) -> list[KubeObject]:
        pods = self._api.list_pods(node_name=node_name, label_selector=label_selector)
        for pod in pods:
            ids = self._ids.get(pod["metadata"]["uid"], {})
            pod.setdefault("status", {})["containerStatuses"] = [{"name": c, "containerID": f"containerd://{i}"} for c, i in sorted(ids.items())]
        return pods

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


class PodRefused(Exception):
    """The admission webhook refused the pod (what kubectl would print)."""


def requested(pods: Any) -> dict[str, int]:
    total: dict[str, int] = {}
    for pod in pods:
        for c in (pod.get("spec") or {}).get("containers") or []:
            limits = (c.get("resources") or {}).get("limits") or {}
            for r in EXTENDED:
                if r in limits:
                    total[r] = total.get(r, 0) + int(str(limits[r]))
    return total


def job_pod(
    name: str,
    limits: Mapping[str, Any],
    *,
    namespace: str = "default",
    app_class: str | None = None,
    tolerate: str | None = "shared",
    containers: Mapping[str, Mapping[str, Any]] | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> KubeObject:
    """The pod a Job of seed 000's scenes creates: a CUDA image asking for GPU resources.
    `tolerate`: the pool kind whose `tessera.dev/gpu` taint it tolerates (None: none, as in the seed)."""
    specs = containers or {"main": limits}
    pod: KubeObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": {}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": c, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "resources": {"limits": {k: str(v) for k, v in lim.items()}}}
                for c, lim in specs.items()
            ],
        },
    }
    if app_class:
        pod["metadata"]["annotations"]["tessera.dev/app-class"] = app_class
    if tolerate:
        pod["spec"]["tolerations"] = [{"key": "tessera.dev/gpu", "operator": "Equal", "value": tolerate, "effect": "NoSchedule"}]
    if node_selector:
        pod["spec"]["nodeSelector"] = dict(node_selector)
    return pod
