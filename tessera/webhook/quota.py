"""Quota admission for GPU shares: a pod's tessera.dev/* request, counted the way Kubernetes counts it.

Kubernetes' ResourceQuota admission (kube-apiserver, after every mutating webhook) charges a pod
`PodRequests` of its defaulted spec: app containers and sidecars summed, the largest init phase if
bigger, plus overhead (`pkg/quota/v1/evaluator/core/pods.go` `PodUsageFunc`; the arithmetic is in
`tessera.alloc.pod_requests`, with the upstream files it follows). kube-scheduler's NodeResourcesFit
reserves the same amount on the node. Tessera's extender gives GPU shares to app containers only, so
this module makes sure the three agree on every pod it admits:

- GPU shares in an init container (one-shot or sidecar) or in `spec.overhead` are refused: quota and
  kube-scheduler would count them, but no container would get them.
- A pod whose request alone exceeds its namespace's `tessera-gpu` quota (the stack's `quotas`) is
  refused here with the sum spelled out, instead of failing in ResourceQuota admission on every
  retry of its controller. What other pods already use is ResourceQuota's business: it still runs.
"""
from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from tessera.alloc.pod_requests import PodRequestBreakdown, is_sidecar, pod_request_breakdown
from tessera.model import contract

TESSERA_RESOURCES = (contract.GPU_CORE, contract.GPU_MEMORY)
QUOTA_NAME = "tessera-gpu"  # tessera.manifests.platform.QUOTA_NAME (the webhook does not import manifests)


def init_container_problem(name: str, container: Mapping[str, Any]) -> str:
    """Why an init container asking for Tessera GPU resources is refused."""
    if is_sidecar(container):
        return (
            f"sidecar container {name!r} (an init container with restartPolicy: Always) asks for Tessera GPU resources; "
            "kube-scheduler and ResourceQuota count it with the app containers, but Tessera gives GPU shares to app "
            "containers only: move it to spec.containers"
        )
    return (
        f"init container {name!r} asks for Tessera GPU resources; Tessera gives GPU shares to app containers only: "
        "move the GPU step into a container (or a separate Job)"
    )


def overhead_problem(pod: Mapping[str, Any]) -> str | None:
    overhead = (pod.get("spec") or {}).get("overhead") or {}
    asked = sorted(key for key in overhead if str(key).startswith("tessera.dev/"))
    if not asked:
        return None
    runtime = (pod.get("spec") or {}).get("runtimeClassName")
    where = f"RuntimeClass {runtime!r}" if runtime else "spec.overhead"
    return (
        f"the pod's overhead ({where}) asks for {', '.join(asked)}; kube-scheduler and ResourceQuota would count it, "
        "but no container gets it: remove Tessera resources from the RuntimeClass overhead"
    )


def _amount(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else str(value.normalize())


def quota_problem(breakdown: PodRequestBreakdown, namespace: str | None, quotas: Mapping[str, Mapping[str, int]]) -> str | None:
    """Why the pod can never fit its namespace's GPU quota; None when it can."""
    hard = quotas.get(namespace or "")
    if not hard:
        return None
    over = []
    for resource in TESSERA_RESOURCES:
        limit = hard.get(resource)
        asked = breakdown.total.get(resource, Decimal(0))
        if limit is not None and asked > limit:
            over.append(f"{resource}={_amount(asked)} ({breakdown.explain(resource)}) but the quota allows {limit}")
    if not over:
        return None
    return (
        f"the pod requests {'; '.join(over)} in namespace {namespace!r} (ResourceQuota {QUOTA_NAME}); "
        "no pod this large is ever admitted there: ask for less or raise the namespace's quota in the stack"
    )


def admission_problem(pod: Mapping[str, Any], namespace: str | None, quotas: Mapping[str, Mapping[str, int]]) -> str | None:
    """For a pod as it will be stored (qGPU names already mapped): overhead, then quota."""
    return overhead_problem(pod) or quota_problem(pod_request_breakdown(pod), namespace, quotas)
