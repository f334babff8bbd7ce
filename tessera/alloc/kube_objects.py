"""Decoding Kubernetes pod and node objects (plain JSON dicts) into the allocation model.

Pure functions: no API calls. Container limits win over requests (extended resources must be
equal in both when both are set). CPU and memory quantities follow Kubernetes' suffixes.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from tessera.alloc.model import ContainerRequest, GpuState, InvalidRequest, NodeState, PodRequest, PodUid
from tessera.alloc.pod_requests import pod_requests
from tessera.alloc.quantity import parse_quantity
from tessera.model.contract import ANNOTATION_APP_CLASS, ANNOTATION_NODE_GPUS, GPU_CORE, GPU_MEMORY, AppClass, NodeGpu

ANNOTATION_GPU_MODELS = "tessera.dev/gpu-models"  # optional pod annotation: "A10,T4" restricts models


def _whole(value: Decimal, what: str) -> int:
    if value != value.to_integral_value():
        raise InvalidRequest(f"{what} must be a whole number, got {value}")
    return int(value)


def container_resources(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container's requests overlaid with its limits (for extended resources the API server
    requires both to be equal when both are set, and either alone means the same)."""
    res = container.get("resources") or {}
    merged = dict(res.get("requests") or {})
    merged.update(res.get("limits") or {})
    return merged


def pod_request_from_k8s(pod: Mapping[str, Any]) -> PodRequest:
    """Read a pod's Tessera request: `tessera.dev/gpu-core` (percent; N*100 = N whole GPUs),
    `tessera.dev/gpu-memory` (MiB per GPU), app class annotation, optional model restriction.
    Raises `InvalidRequest` with a message saying what to fix."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    containers: list[ContainerRequest] = []
    # CPU and memory as kube-scheduler's NodeResourcesFit counts them (init containers, sidecars,
    # overhead); GPU shares go to app containers only (the webhook refuses them anywhere else)
    host = pod_requests(pod, ("cpu", "memory"))
    cpu, memory = host["cpu"], host["memory"]
    for c in spec.get("containers") or []:
        name = str(c.get("name", ""))
        res = container_resources(c)
        core = _whole(parse_quantity(res.get(GPU_CORE, 0)), f"container {name!r}: {GPU_CORE}")
        gpu_mem = res.get(GPU_MEMORY)
        mem_mib = None if gpu_mem is None else _whole(parse_quantity(gpu_mem), f"container {name!r}: {GPU_MEMORY} (MiB)")
        containers.append(ContainerRequest.from_core(name, core, mem_mib))
    app_class_text = annotations.get(ANNOTATION_APP_CLASS)
    app_class: AppClass | None
    if app_class_text in (None, ""):
        app_class = None
    elif app_class_text == "online":
        app_class = "online"
    elif app_class_text == "offline":
        app_class = "offline"
    else:
        raise InvalidRequest(f"annotation {ANNOTATION_APP_CLASS}={app_class_text!r}: use 'online' or 'offline'")
    models_text = annotations.get(ANNOTATION_GPU_MODELS)
    models = frozenset(m.strip() for m in str(models_text).split(",") if m.strip()) if models_text else None
    return PodRequest(
        uid=PodUid(str(meta.get("uid") or f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")),
        containers=tuple(containers),
        cpu_milli=int(cpu * 1000),
        memory_mib=int(memory / (2**20)),
        gpu_models=models or None,
        app_class=app_class,
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
    )


def node_state_from_k8s(node: Mapping[str, Any], *, track_host_resources: bool = False) -> NodeState | None:
    """A node's GPU inventory from its `tessera.dev/gpus` annotation; None when it has none.
    With `track_host_resources`, CPU and memory come from status.allocatable (the extender may
    leave them to kube-scheduler's own fit check)."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    raw = annotations.get(ANNOTATION_NODE_GPUS)
    if not raw:
        return None
    try:
        reported = [NodeGpu.from_json(g) for g in json.loads(raw)]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidRequest(f"node {meta.get('name')}: bad {ANNOTATION_NODE_GPUS} annotation: {exc}") from None
    gpus = [GpuState(g.index, g.uuid, g.model, g.memory_mib, g.healthy, sm_count=g.sm_count) for g in sorted(reported, key=lambda g: g.index)]
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    cpu = mem = None
    if track_host_resources:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        cpu = int(parse_quantity(alloc.get("cpu", 0)) * 1000)
        mem = int(parse_quantity(alloc.get("memory", 0)) / (2**20))
    return NodeState(str(meta.get("name", "")), gpus, cpu, mem, labels)
