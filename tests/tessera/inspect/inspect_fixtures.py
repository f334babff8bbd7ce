"""Node and Pod objects as the API server returns them, for `tessera inspect` tests.

Inventories and allocation records are written with the contract's own classes (`NodeGpu`,
`Allocation`), exactly as the node DaemonSet and the extender write them."""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tessera.model.contract import (
    ANNOTATION_APP_CLASS,
    ANNOTATION_NODE_GPUS,
    GPU_CORE,
    GPU_MEMORY,
    LABEL_POOL,
    LABEL_POOL_KIND,
    SCHEDULER_NAME,
    Allocation,
    GpuShare,
    NodeGpu,
)
from tessera.kube.api import KubeApi, KubeObject

DATA = Path(__file__).parent / "data"
CLUSTER_DUMP = DATA / "cluster.json"  # the example in docs/operations.md
T4_MIB = 15360
ASSUMED_AT = "2025-06-01T10:00:00Z"

Container = tuple[str, int, int | None]  # (name, gpu-core %, gpu-memory MiB or None)
Grant = tuple[int, int, int]  # (GPU index, core %, memory MiB) in an allocation record


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def shared_node(
    name: str,
    gpus: int = 2,
    *,
    pool: str | None = "t4-shared",
    kind: str | None = "shared",
    model: str = "T4",
    memory_mib: int = T4_MIB,
    unhealthy: Iterable[int] = (),
    inventory: bool = True,
    ready: bool = True,
    labels: Mapping[str, str] | None = None,
) -> KubeObject:
    down = set(unhealthy)
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if pool is not None:
        meta["labels"][LABEL_POOL] = pool
    if kind is not None:
        meta["labels"][LABEL_POOL_KIND] = kind
    if inventory:
        reported = [NodeGpu(i, gpu_uuid(name, i), model, memory_mib, i not in down).to_json() for i in range(gpus)]
        meta["annotations"] = {ANNOTATION_NODE_GPUS: json.dumps(reported)}
    return {
        "metadata": meta,
        "spec": {},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi"}, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def whole_node(name: str, kind: str | None, pool: str | None, allocatable: Mapping[str, str]) -> KubeObject:
    labels = {k: v for k, v in ((LABEL_POOL, pool), (LABEL_POOL_KIND, kind)) if v is not None}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "32", **allocatable}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def record(node: str, grants: Mapping[str, Sequence[Grant]], *, uuids: Mapping[int, str] | None = None) -> Allocation:
    """The allocation record the extender writes for these grants on `node`."""
    return Allocation(
        node,
        ASSUMED_AT,
        {c: tuple(GpuShare(i, (uuids or {}).get(i, gpu_uuid(node, i)), core, mem) for i, core, mem in g) for c, g in grants.items()},
    )


def gpu_pod(
    name: str,
    containers: Sequence[Container],
    *,
    namespace: str = "ml",
    node: str | None = None,
    allocation: Allocation | None = None,
    raw_record: str | None = None,
    phase: str = "Running",
    app_class: str | None = None,
) -> KubeObject:
    """A pod asking for tessera.dev/*; bound to `node` when given, annotated with `allocation`."""
    annotations: dict[str, str] = {}
    if app_class:
        annotations[ANNOTATION_APP_CLASS] = app_class
    if allocation is not None:
        annotations.update(allocation.pod_annotations())
    if raw_record is not None:
        annotations["tessera.dev/allocation"] = raw_record
    specs = []
    for cname, core, memory in containers:
        limits = {GPU_CORE: str(core)} if core else {}
        if memory is not None:
            limits[GPU_MEMORY] = str(memory)
        specs.append({"name": cname, "image": "cuda:12", "resources": {"limits": limits}})
    spec: dict[str, Any] = {"schedulerName": SCHEDULER_NAME, "containers": specs}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}", "annotations": annotations},
        "spec": spec,
        "status": {"phase": phase},
    }


def nvidia_pod(
    name: str, node: str | None, resources: Sequence[Mapping[str, str]], *, init: Sequence[Mapping[str, str]] = (), phase: str = "Running"
) -> KubeObject:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "resources": {"limits": dict(r)}} for i, r in enumerate(resources)]}
    if init:
        spec["initContainers"] = [{"name": f"init{i}", "resources": {"limits": dict(r)}} for i, r in enumerate(init)]
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec, "status": {"phase": phase}}


def as_list(nodes: Iterable[KubeObject], pods: Iterable[KubeObject]) -> dict[str, Any]:
    """What `kubectl get nodes,pods -A -o json` prints: a v1 List whose items carry their kind."""
    items = [{"apiVersion": "v1", "kind": "Node", **n} for n in nodes] + [{"apiVersion": "v1", "kind": "Pod", **p} for p in pods]
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def dump_api(api: KubeApi, path: Path) -> Path:
    """Write the cluster behind `api` as `kubectl get nodes,pods -A -o json` would."""
    path.write_text(json.dumps(as_list(api.list_nodes(), api.list_pods()), indent=2), encoding="utf-8")
    return path
