"""`--simulate`: an in-memory cluster for the extender, built from an openb-schema node CSV.

Nodes become Kubernetes Node objects with a synthetic `tessera.dev/gpus` inventory (UUIDs derived
from the node name; per-GPU memory from the `gpu_mem_mib` column, else a table of the trace's
models), labels of a shared pool, and allocatable CPU/memory from the CSV. Pods that clients send
to /filter are created in this cluster (`ensure_pod`), so /bind binds them here. Trace pods become
pod manifests with `trace_pod_manifest` (used by the benchmark and tests).
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from tessera.alloc import MILLI_PER_GPU, NodeState, PodRequest
from tessera.alloc.kube_objects import ANNOTATION_GPU_MODELS
from tessera.alloc.model import MILLI_PER_CORE, UNTRACKED
from tessera.model.contract import (
    ANNOTATION_NODE_GPUS,
    GPU_CORE,
    GPU_MEMORY,
    LABEL_GPU_PLACEMENT,
    LABEL_POOL,
    LABEL_POOL_KIND,
    SCHEDULER_NAME,
    NodeGpu,
)
from tessera.kube.api import Conflict, KubeObject, NotFound
from tessera.kube.fake import FakeKubeApi
from tessera.sim.trace import load_nodes

SIMULATED_POOL: Final = "simulated"
# GPU memory of the trace's models when the CSV has no gpu_mem_mib column (G2/G3 are anonymised
# in the trace; 16 GiB is assumed). Only pods asking for tessera.dev/gpu-memory are affected.
MODEL_MEMORY_MIB: Final = {"P100": 16384, "T4": 15360, "V100M16": 16384, "V100M32": 32768, "A10": 24576, "A100": 40960, "H100": 81920}
DEFAULT_MEMORY_MIB: Final = 16384


def gpu_uuid(node: str, index: int) -> str:
    """Stable, UUID-shaped like NVML's `GPU-...`, so every run gives the same ids."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/{index}"))


def node_manifest(node: NodeState, *, gpu_placement: str | None = None) -> KubeObject:
    gpus = [
        NodeGpu(g.index, gpu_uuid(node.name, g.index), g.model, g.memory_mib if g.memory_mib < UNTRACKED else MODEL_MEMORY_MIB.get(g.model, DEFAULT_MEMORY_MIB))
        for g in node.gpus
    ]
    labels = {LABEL_POOL: SIMULATED_POOL, LABEL_POOL_KIND: "shared", "kubernetes.io/hostname": node.name}
    if gpu_placement:
        labels[LABEL_GPU_PLACEMENT] = gpu_placement
    allocatable = {"pods": "110"}
    if node.cpu_milli is not None:
        allocatable["cpu"] = f"{node.cpu_milli}m"
    if node.memory_mib is not None:
        allocatable["memory"] = f"{node.memory_mib}Mi"
    allocatable[GPU_CORE] = str(100 * len(gpus))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": labels,
            "annotations": {ANNOTATION_NODE_GPUS: json.dumps([g.to_json() for g in gpus], separators=(",", ":"))},
        },
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def simulated_api(nodes_csv: Path, *, gpu_placement: str | None = None) -> FakeKubeApi:
    """An in-memory API server holding the CSV's GPU nodes. Raises `tessera.sim.trace.TraceError`."""
    api = FakeKubeApi()
    for node in load_nodes(nodes_csv):
        api.create_node(node_manifest(node, gpu_placement=gpu_placement))
    return api


def ensure_pod(api: FakeKubeApi, pod: KubeObject) -> KubeObject:
    """The pod as stored in the simulated cluster, created from the request's copy if new."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    if not name:
        return pod
    try:
        return api.get_pod(namespace, name)
    except NotFound:
        # create_pod stores a deep copy; only the levels changed here are copied for it
        spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
        body = {**pod, "metadata": {**meta, "namespace": namespace}, "spec": spec, "status": {"phase": "Pending"}}
        try:
            return api.create_pod(body)
        except Conflict:  # created concurrently by another request for the same pod
            return api.get_pod(namespace, name)


def trace_pod_manifest(request: PodRequest, *, namespace: str = "default") -> KubeObject:
    """A pod manifest asking for what a trace pod asks for (compute rounded up to whole percent)."""
    containers = []
    for c in request.containers:
        resources: dict[str, str] = {}
        if c.gpu_count:
            core = c.gpu_count * 100 if c.gpu_milli >= MILLI_PER_GPU else -(-c.gpu_milli // MILLI_PER_CORE)
            resources[GPU_CORE] = str(core)
            if c.gpu_memory_mib is not None:
                resources[GPU_MEMORY] = str(c.gpu_memory_mib)
        containers.append({"name": c.name, "image": "busybox", "resources": {"requests": dict(resources), "limits": dict(resources)}})
    first = containers[0]["resources"]
    assert isinstance(first, dict)
    if request.cpu_milli:
        first["requests"]["cpu"] = f"{request.cpu_milli}m"
    if request.memory_mib:
        first["requests"]["memory"] = f"{request.memory_mib}Mi"
    annotations = {ANNOTATION_GPU_MODELS: ",".join(sorted(request.gpu_models))} if request.gpu_models else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": request.name or str(request.uid), "namespace": namespace, "uid": str(uuid.uuid4()), "annotations": annotations},
        "spec": {"schedulerName": SCHEDULER_NAME, "containers": containers},
        "status": {"phase": "Pending"},
    }


def names(nodes: Iterable[KubeObject]) -> list[str]:
    return [str(n["metadata"]["name"]) for n in nodes]
