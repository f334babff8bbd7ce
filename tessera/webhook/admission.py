"""The mutating admission decision for pods: AdmissionReview v1 in, AdmissionReview v1 out.

Pure: no I/O, no clock. The HTTP server (`tessera.webhook.server`) decodes the body, calls
`review()` and encodes the result. What a pod gets:

1. qGPU names (`tke.cloud.tencent.com/qgpu-core` %, `qgpu-memory` GiB) become Tessera names
   (`tessera.dev/gpu-core` %, `tessera.dev/gpu-memory` MiB) when the pod can only land on pools
   that opted in (see `alias_mapping_applies`).
2. `schedulerName: tessera-scheduler` when any container asks for `tessera.dev/*`, and a
   toleration of the shared pools' taint `tessera.dev/gpu=shared:NoSchedule` unless the pod
   already tolerates it (qGPU users' manifests carry no Tessera toleration; without it
   kube-scheduler filters every shared node out before the extender is asked).
3. The annotation `tessera.dev/allocation-configmap` and, in every GPU container, env entries
   read from that ConfigMap (`<container>.<KEY>`), which the extender writes at bind.
4. A request that cannot be scheduled correctly is rejected with a message saying what to change,
   and so is one that cannot fit its namespace's GPU quota, counted as kube-scheduler and
   ResourceQuota count it (`tessera.webhook.quota`).
"""
from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from tessera.kube.shape import STRING, ShapeError, Struct, check_pod
from tessera.model import contract
from tessera.model.allocation_record import CONFIGMAP_PREFIX as ALLOCATION_CONFIGMAP_PREFIX
from tessera.alloc.model import InvalidRequest
from tessera.webhook.quantity import QuantityError, parse_whole_quantity
from tessera.webhook.quota import admission_problem, init_container_problem
from tessera.webhook.settings import WebhookSettings

ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"
DEFAULT_SCHEDULER: Final = "default-scheduler"
TESSERA_PREFIX: Final = "tessera.dev/"
MIB_PER_GIB: Final = 1024
SHARED_POOL_KIND: Final = "shared"  # the value of the TAINT_GPU taint on pools that offer tessera.dev/*
# Every shared node carries TAINT_GPU=shared:NoSchedule (tessera/model/labels_taints.py), and
# tessera.dev/* resources exist only on shared nodes, so every pod the webhook routes needs this.
SHARED_GPU_TOLERATION: Final[Mapping[str, str]] = MappingProxyType(
    {"key": contract.TAINT_GPU, "operator": "Equal", "value": SHARED_POOL_KIND, "effect": "NoSchedule"}
)
# Without the device list a container would see every GPU the runtime exposes, so a missing key
# must stop the container (CreateContainerConfigError) instead of starting it unconfined. The
# MPS keys only exist on pools that use MPS, so they are optional.
REQUIRED_ENV_KEYS: Final = frozenset({"NVIDIA_VISIBLE_DEVICES", "TESSERA_GPU_CORE", "TESSERA_GPU_MEMORY_MIB"})
_CONTAINER_SECTIONS: Final = ("initContainers", "containers")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

JsonPatchOp = dict[str, Any]
# The AdmissionRequest fields read before the pod (admission/v1 types.go); others are ignored.
_REQUEST: Final = Struct(
    {
        "uid": STRING,
        "kind": Struct({"group": STRING, "version": STRING, "kind": STRING}),
        "operation": STRING,
        "subResource": STRING,
        "namespace": STRING,
    }
)


class InvalidReview(ValueError):
    """The body is not an AdmissionReview v1 with a `request.uid` (answered with HTTP 400: no
    AdmissionReview reply is possible without the uid). `path` names the field."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class PodRejected(ValueError):
    """The pod asks for GPU resources in a way Tessera cannot honour; the message tells the user."""


@dataclass(frozen=True)
class Mutation:
    patch: tuple[JsonPatchOp, ...]
    warnings: tuple[str, ...] = ()


def escape_pointer(token: str) -> str:
    """RFC 6901: `~` -> `~0`, `/` -> `~1` (resource and annotation names contain `/`)."""
    return token.replace("~", "~0").replace("/", "~1")


def review(body: Any, settings: WebhookSettings, *, namespace_opted_in: bool) -> dict[str, Any]:
    """Answer one AdmissionReview. Raises InvalidReview for a body that is not one; a review with
    a uid always gets an answer, `allowed: false` when its request or pod is malformed."""
    request = _request_of(body)
    uid: str = request["uid"]
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    try:
        _REQUEST.check(request, "request")
    except ShapeError as exc:
        return _wrap(_deny(response, str(exc)))
    kind = request.get("kind") or {}
    if kind.get("kind") != "Pod" or request.get("operation") != "CREATE" or request.get("subResource"):
        return _wrap(response)
    try:
        pod = check_pod(request.get("object"), "request.object")
    except ShapeError as exc:
        return _wrap(_deny(response, str(exc)))
    try:
        mutation = mutate_pod(
            pod,
            request_uid=uid,
            settings=settings,
            namespace_opted_in=namespace_opted_in,
            namespace=request.get("namespace") if isinstance(request.get("namespace"), str) else None,
        )
    except PodRejected as exc:
        return _wrap(_deny(response, str(exc)))
    if mutation.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(mutation.patch), separators=(",", ":")).encode()).decode()
    if mutation.warnings:
        response["warnings"] = list(mutation.warnings)
    return _wrap(response)


def mutate_pod(
    pod: Mapping[str, Any], *, request_uid: str, settings: WebhookSettings, namespace_opted_in: bool, namespace: str | None = None
) -> Mutation:
    """The JSONPatch for one pod being created; raises PodRejected with the user-facing reason.
    `namespace`: the AdmissionRequest's (default: the pod's metadata.namespace), for quota admission."""
    spec = pod.get("spec") or {}
    map_aliases = alias_mapping_applies(pod, settings, namespace_opted_in=namespace_opted_in)
    patch: list[JsonPatchOp] = []
    warnings: list[str] = []
    gpu_containers: list[tuple[str, int, Mapping[str, Any]]] = []
    stored = copy.deepcopy(dict(pod))  # the pod as it will be stored: qGPU names mapped
    for section in _CONTAINER_SECTIONS:
        for index, container in enumerate(spec.get(section) or []):
            name = str(container.get("name", ""))
            resources = container.get("resources") or {}
            limits, requests = dict(resources.get("limits") or {}), dict(resources.get("requests") or {})
            if _has_qgpu(limits) or _has_qgpu(requests):
                if not map_aliases:
                    warnings.append(
                        f"container {name!r} asks for tke.cloud.tencent.com/qgpu-* but its pool has not opted in "
                        f"to qGPU names; label the namespace {contract.LABEL_NAMESPACE_QGPU_ALIASES}=true or set "
                        "sharing.qgpu_aliases on the pool, or use tessera.dev/gpu-core and tessera.dev/gpu-memory"
                    )
                    continue
                limits, requests = _map_qgpu(name, limits), _map_qgpu(name, requests)
                stored["spec"][section][index]["resources"] = {"limits": limits, "requests": requests}
                base = f"/spec/{section}/{index}/resources"
                if limits:
                    patch.append({"op": "add", "path": f"{base}/limits", "value": limits})
                if requests:
                    patch.append({"op": "add", "path": f"{base}/requests", "value": requests})
            if _gpu_core_of(name, limits, requests) > 0:
                if section == "initContainers":
                    # The extender allocates GPUs to app containers only; an init container's
                    # env would name keys that never appear, and it would wait forever.
                    raise PodRejected(init_container_problem(name, container))
                gpu_containers.append((section, index, container))
    if not gpu_containers:
        return Mutation(tuple(patch), tuple(warnings))
    _refuse_dra_pools(pod, settings)
    try:
        problem = admission_problem(stored, namespace or (pod.get("metadata") or {}).get("namespace"), settings.quotas)
    except InvalidRequest as exc:  # a quantity kube-apiserver would not have accepted either
        raise PodRejected(str(exc)) from None
    if problem is not None:
        raise PodRejected(problem)
    patch.extend(_scheduler_name_patch(spec, settings.scheduler_name))
    patch.extend(_toleration_patch(spec, SHARED_GPU_TOLERATION))
    configmap = _allocation_configmap_name(pod, request_uid)
    patch.extend(_annotation_patch(pod, contract.ANNOTATION_ALLOCATION_CONFIGMAP, configmap))
    for section, index, container in gpu_containers:
        patch.append(_env_patch(section, index, container, configmap))
    return Mutation(tuple(patch), tuple(warnings))


def _refuse_dra_pools(pod: Mapping[str, Any], settings: WebhookSettings) -> None:
    """A tessera.dev/gpu-core pod that can only land on dra pools would wait forever: those nodes
    offer no gpu-core (no Kubernetes release maps an extended resource to a device's capacity;
    KEP-5004 maps it to a device count). Say how to ask instead."""
    pools = pinned_pools(pod)
    if pools and pools <= settings.dra_pools:
        names = ", ".join(sorted(pools))
        classes = ", ".join(f"{p}.{contract.DRA_DRIVER}" for p in sorted(pools))
        raise PodRejected(
            f"pool {names} hands out GPUs through DRA (allocation: dra), not {contract.GPU_CORE}: ask with a ResourceClaim "
            f"(or ResourceClaimTemplate) on DeviceClass {classes} for capacity cores and memory (docs/dra.md), or pin the pod to a device-plugin pool"
        )


def alias_mapping_applies(pod: Mapping[str, Any], settings: WebhookSettings, *, namespace_opted_in: bool) -> bool:
    """qGPU names are mapped when the namespace opted in, when every pool the pod can land on
    opted in, or (for a pod pinned to no pool) when every shared pool opted in."""
    if namespace_opted_in:
        return True
    pools = pinned_pools(pod)
    if pools is None:
        return settings.aliases_for_unpinned_pods()
    return bool(pools) and pools <= settings.qgpu_alias_pools


def pinned_pools(pod: Mapping[str, Any]) -> frozenset[str] | None:
    """The pools the pod can be scheduled to, from nodeSelector and required node affinity on
    `tessera.dev/pool`; None when the pod does not constrain the pool."""
    spec = pod.get("spec") or {}
    candidates: frozenset[str] | None = None
    selected = (spec.get("nodeSelector") or {}).get(contract.LABEL_POOL)
    if selected is not None:
        candidates = frozenset({str(selected)})
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms:
        # Terms are ORed: the affinity pins the pool only if every term does.
        union: set[str] = set()
        for term in terms:
            term_pools = _term_pools(term)
            if term_pools is None:
                return candidates
            union |= term_pools
        candidates = frozenset(union) if candidates is None else candidates & union
    return candidates


def _term_pools(term: Mapping[str, Any]) -> set[str] | None:
    pools: set[str] | None = None
    for expression in term.get("matchExpressions") or []:
        if expression.get("key") == contract.LABEL_POOL and expression.get("operator") == "In":
            values = {str(v) for v in expression.get("values") or []}
            pools = values if pools is None else pools & values
    return pools


def _request_of(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise InvalidReview("the request body must be a JSON object (an AdmissionReview)")
    if body.get("apiVersion") != ADMISSION_API_VERSION:
        raise InvalidReview(
            f"must be {ADMISSION_API_VERSION} (the webhook configuration lists admissionReviewVersions [v1]), "
            f"got {str(body.get('apiVersion'))[:100]!r}",
            "apiVersion",
        )
    if body.get("kind") != "AdmissionReview":
        raise InvalidReview(f"must be AdmissionReview, got {str(body.get('kind'))[:100]!r}", "kind")
    request = body.get("request")
    if not isinstance(request, dict):
        raise InvalidReview("is required (an object)", "request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise InvalidReview("is required (a non-empty string the reply must echo)", "request.uid")
    return request


def _deny(response: dict[str, Any], message: str) -> dict[str, Any]:
    response["allowed"] = False
    response["status"] = {"status": "Failure", "code": 400, "reason": "BadRequest", "message": f"tessera: {message}"}
    return response


def _wrap(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


def _has_qgpu(resources: Mapping[str, Any]) -> bool:
    return contract.QGPU_CORE in resources or contract.QGPU_MEMORY in resources


def _quantity(container: str, resource: str, value: object) -> int:
    try:
        return parse_whole_quantity(value)
    except QuantityError as exc:
        raise PodRejected(f"container {container!r}: {resource} {exc}; use a whole number") from exc


def _map_qgpu(container: str, resources: Mapping[str, Any]) -> dict[str, Any]:
    if not _has_qgpu(resources):
        return dict(resources)
    if any(key.startswith(TESSERA_PREFIX) for key in resources):
        raise PodRejected(
            f"container {container!r} mixes tke.cloud.tencent.com/qgpu-* and tessera.dev/* resources; use one set"
        )
    if contract.QGPU_MEMORY in resources and contract.QGPU_CORE not in resources:
        raise PodRejected(
            f"container {container!r} asks for {contract.QGPU_MEMORY} without {contract.QGPU_CORE}; "
            "add a qgpu-core request (percent of one GPU)"
        )
    out = {k: v for k, v in resources.items() if k not in (contract.QGPU_CORE, contract.QGPU_MEMORY)}
    out[contract.GPU_CORE] = str(_quantity(container, contract.QGPU_CORE, resources[contract.QGPU_CORE]))
    if contract.QGPU_MEMORY in resources:
        gib = _quantity(container, contract.QGPU_MEMORY, resources[contract.QGPU_MEMORY])
        out[contract.GPU_MEMORY] = str(gib * MIB_PER_GIB)
    return out


def _gpu_core_of(container: str, limits: Mapping[str, Any], requests: Mapping[str, Any]) -> int:
    """Validate the container's Tessera request and return its gpu-core (0 = no GPU)."""
    merged = {**requests, **limits}  # limits win: extended resources must have equal requests
    core_value, memory_value = merged.get(contract.GPU_CORE), merged.get(contract.GPU_MEMORY)
    unknown = sorted(k for k in merged if k.startswith(TESSERA_PREFIX) and k not in (contract.GPU_CORE, contract.GPU_MEMORY))
    if unknown:
        raise PodRejected(
            f"container {container!r} asks for unknown resource(s) {unknown}; "
            f"Tessera offers {contract.GPU_CORE} and {contract.GPU_MEMORY}"
        )
    if core_value is None:
        if memory_value is not None:
            raise PodRejected(
                f"container {container!r} asks for {contract.GPU_MEMORY} without {contract.GPU_CORE}; "
                "add a gpu-core request (1..100 for a share of one GPU)"
            )
        return 0
    core = _quantity(container, contract.GPU_CORE, core_value)
    if core < 1 or (core > contract.CORE_PER_GPU and core % contract.CORE_PER_GPU):
        raise PodRejected(
            f"container {container!r} asks for {contract.GPU_CORE}={core}; use 1..100 for a share of one GPU "
            "or a multiple of 100 for whole GPUs"
        )
    if memory_value is not None and _quantity(container, contract.GPU_MEMORY, memory_value) < 1:
        raise PodRejected(f"container {container!r} asks for {contract.GPU_MEMORY}=0; omit it or give MiB >= 1")
    if contract.NVIDIA_GPU in merged:
        raise PodRejected(
            f"container {container!r} asks for both {contract.NVIDIA_GPU} and {contract.GPU_CORE}; "
            "a container gets GPUs from one device plugin: use gpu-core: 100 for a whole shared-pool GPU"
        )
    return core


def _scheduler_name_patch(spec: Mapping[str, Any], scheduler: str) -> list[JsonPatchOp]:
    current = spec.get("schedulerName")
    if current == scheduler:
        return []
    if current not in (None, "", DEFAULT_SCHEDULER):
        raise PodRejected(
            f"the pod sets schedulerName {current!r}, but tessera.dev/* resources are placed only by "
            f"{scheduler!r}; remove schedulerName from the pod"
        )
    return [{"op": "add", "path": "/spec/schedulerName", "value": scheduler}]


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' toleration matching: an empty effect matches every effect, `Exists` with an
    empty key matches every taint, `Exists` matches any value of its key, and `Equal` (the
    default operator) needs the same key and value."""
    if toleration.get("effect") not in (None, "", taint.get("effect")):
        return False
    key = toleration.get("key") or ""
    if toleration.get("operator") == "Exists":
        return key in ("", taint.get("key"))
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def _toleration_patch(spec: Mapping[str, Any], wanted: Mapping[str, str]) -> list[JsonPatchOp]:
    """Add `wanted` unless a toleration the pod has already tolerates the same taint (so a
    re-invoked webhook, or a user's own `operator: Exists`, never gets a duplicate)."""
    current = spec.get("tolerations")
    taint = {"key": wanted["key"], "value": wanted["value"], "effect": wanted["effect"]}
    if current and any(isinstance(t, Mapping) and tolerates(t, taint) for t in current):
        return []
    if not current:
        return [{"op": "add", "path": "/spec/tolerations", "value": [dict(wanted)]}]
    return [{"op": "add", "path": "/spec/tolerations/-", "value": dict(wanted)}]


def _allocation_configmap_name(pod: Mapping[str, Any], request_uid: str) -> str:
    """Keep a name set earlier (re-invocation); otherwise derive it from the admission request uid,
    because the pod's own name (generateName) and uid are not assigned yet at admission time."""
    existing = ((pod.get("metadata") or {}).get("annotations") or {}).get(contract.ANNOTATION_ALLOCATION_CONFIGMAP)
    if existing:
        return str(existing)
    name = ALLOCATION_CONFIGMAP_PREFIX + request_uid.lower()
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise PodRejected(f"cannot derive an allocation ConfigMap name from request uid {request_uid!r}")
    return name


def _annotation_patch(pod: Mapping[str, Any], key: str, value: str) -> list[JsonPatchOp]:
    annotations = (pod.get("metadata") or {}).get("annotations")
    if annotations is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": {key: value}}]
    if annotations.get(key) == value:
        return []
    return [{"op": "add", "path": f"/metadata/annotations/{escape_pointer(key)}", "value": value}]


def _env_patch(section: str, index: int, container: Mapping[str, Any], configmap: str) -> JsonPatchOp:
    """Replace the container's env so the allocation keys come only from the ConfigMap: a user's
    own NVIDIA_VISIBLE_DEVICES would otherwise widen the container's GPU set."""
    name = str(container.get("name", ""))
    keep = [e for e in container.get("env") or [] if e.get("name") not in contract.ALLOCATION_ENV_KEYS]
    injected = [
        {
            "name": key,
            "valueFrom": {
                "configMapKeyRef": {"name": configmap, "key": f"{name}.{key}", "optional": key not in REQUIRED_ENV_KEYS}
            },
        }
        for key in contract.ALLOCATION_ENV_KEYS
    ]
    return {"op": "add", "path": f"/spec/{section}/{index}/env", "value": keep + injected}
