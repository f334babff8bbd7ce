"""What is written at bind besides the pod annotations: the allocation ConfigMap.

Pure functions. The ConfigMap holds, per container, the keys of `ALLOCATION_ENV_KEYS` as
`<container>.<KEY>`; the webhook wired each container's env to them with `configMapKeyRef`.
The `CUDA_MPS_*` keys are written only for fixed-share pools, the only ones whose GPUs run an MPS
control daemon; elsewhere they would point clients at a pipe directory nobody serves. The webhook
marks exactly those refs `optional`, so an absent key leaves the variable unset instead of
blocking the container.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tessera.model.pool_policy import read_pool_policy
from tessera.model.contract import (
    ALLOCATION_ENV_KEYS,
    ANNOTATION_ALLOCATION_CONFIGMAP,
    Allocation,
    GpuShare,
    mps_log_directory,
    mps_pipe_directory,
    mps_thread_percentage,
)

KubeObject = dict[str, Any]  # a Kubernetes object as JSON (tessera.kube.api.KubeObject; the model stands below kube)

MPS_ENV_KEYS: Final = tuple(k for k in ALLOCATION_ENV_KEYS if k.startswith("CUDA_MPS_"))
CONFIGMAP_PREFIX: Final = "tessera-alloc-"  # the webhook names ConfigMaps with it; the binder too, when the webhook did not
ALLOCATION_LABEL: Final = "tessera.dev/allocation-for"  # ConfigMap label: the pod's name


def uses_mps(node_labels: Mapping[str, str]) -> bool:
    """Whether the node's pool runs MPS, from the node's effective labels (the extender has
    applied the pools file to them already), by the rule the node agent uses."""
    return read_pool_policy(node_labels, {}).policy.uses_mps


def container_env(
    shares: tuple[GpuShare, ...], gpu_memory_mib: Mapping[int, int], *, mps: bool = True, sm_counts: Mapping[int, int | None] | None = None
) -> dict[str, str]:
    """The env of one container. Memory limits use device ordinals as the container sees them
    (0..n-1 in NVIDIA_VISIBLE_DEVICES order), which is what MPS clients index by. A share that
    asked for no memory gets the GPU's full memory (`gpu_memory_mib`: index -> MiB). The MPS
    percentage is `mps_thread_percentage` of the share on its GPU's SM count (`sm_counts`: index
    -> SMs as the node reported them; unknown: the share's percent)."""
    limits = [s.memory_mib or gpu_memory_mib.get(s.index, 0) for s in shares]
    first = shares[0].uuid
    env = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(s.uuid for s in shares),
        "TESSERA_GPU_CORE": str(sum(s.core for s in shares)),
        "TESSERA_GPU_MEMORY_MIB": str(limits[0]),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(mps_thread_percentage(shares[0].core, (sm_counts or {}).get(shares[0].index))),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ",".join(f"{i}={mib}M" for i, mib in enumerate(limits)),
        "CUDA_MPS_PIPE_DIRECTORY": mps_pipe_directory(first),
        "CUDA_MPS_LOG_DIRECTORY": mps_log_directory(first),
    }
    assert tuple(env) == ALLOCATION_ENV_KEYS, "keep in step with tessera.model.contract.ALLOCATION_ENV_KEYS"
    if not mps:
        for key in MPS_ENV_KEYS:
            del env[key]
    return env


def configmap_data(
    allocation: Allocation, gpu_memory_mib: Mapping[int, int], *, mps: bool = True, sm_counts: Mapping[int, int | None] | None = None
) -> dict[str, str]:
    """`mps`: write the `CUDA_MPS_*` keys (fixed-share pools; see `uses_mps`). Default True for
    callers that model a fixed-share node; the extender passes the node's pool policy."""
    data: dict[str, str] = {}
    for container, shares in sorted(allocation.containers.items()):
        if shares:
            data.update({f"{container}.{key}": value for key, value in container_env(shares, gpu_memory_mib, mps=mps, sm_counts=sm_counts).items()})
    return data


def configmap_name(pod: KubeObject) -> str:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    name = annotations.get(ANNOTATION_ALLOCATION_CONFIGMAP)
    return str(name) if name else CONFIGMAP_PREFIX + str(pod["metadata"].get("uid", pod["metadata"]["name"])).lower()


def configmap_body(pod: KubeObject, name: str, data: Mapping[str, str]) -> KubeObject:
    """Owned by the pod, so the garbage collector deletes it with the pod."""
    meta = pod["metadata"]
    owner: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "blockOwnerDeletion": False,
        "controller": False,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", "default"),
            "labels": {ALLOCATION_LABEL: meta["name"][:63].rstrip("-_.")},
            "ownerReferences": [owner],
        },
        "data": dict(data),
    }
