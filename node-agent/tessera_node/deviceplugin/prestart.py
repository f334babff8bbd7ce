"""PreStartContainer verification: which container is starting, and is it entitled to its GPU?

Pure functions. The inputs are kubelet's own record of who holds the tokens (PodResources), the
pod object and its allocation ConfigMap as the API server returns them; the output is the
registry record for the node agent, or `PreStartRejected` with a reason the user can act on.
Failing here fails the container start (fail closed): a container never runs on a GPU that its
pod's allocation record does not name.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tessera.model.contract import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_ALLOCATION_CONFIGMAP,
    ANNOTATION_APP_CLASS,
    Allocation,
)
from tessera_node.registry import AppClass, ContainerName, PodUid, RegisteredContainer
from tessera.model.pool_policy import PoolPolicy
from tessera_node.deviceplugin.core import Inventory
from tessera_node.deviceplugin.podresources import TokenHolder

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
KubeObject = dict[str, Any]


class PreStartRejected(Exception):
    """The container must not start; the message says why and what to do."""


@dataclass(frozen=True)
class Owner:
    namespace: str
    pod: str
    container: str


def find_owner(holders: Sequence[TokenHolder], tokens: Sequence[str]) -> Owner:
    """The one container kubelet gave exactly these tokens to."""
    wanted = frozenset(tokens)
    matches = [h for h in holders if h.tokens == wanted]
    if len(matches) == 1:
        m = matches[0]
        return Owner(m.namespace, m.pod, m.container)
    if not matches:
        raise PreStartRejected(
            f"kubelet's PodResources shows no container holding exactly the tessera.dev/gpu-core devices "
            f"{_short(wanted)}; the pod was probably deleted while starting — kubelet will retry or drop it"
        )
    names = ", ".join(f"{m.namespace}/{m.pod}/{m.container}" for m in matches)
    raise PreStartRejected(f"devices {_short(wanted)} are held by several containers ({names}); refusing to guess")


def _short(tokens: frozenset[str]) -> str:
    ordered = sorted(tokens)
    return f"[{', '.join(ordered[:3])}{', ...' if len(ordered) > 3 else ''}] ({len(ordered)} tokens)"


def _container_env_ref(pod: Mapping[str, Any], container: str, env: str) -> tuple[str, str] | None:
    """(configmap, key) that the container's `env` takes `env` from, if it is a configMapKeyRef."""
    spec = pod.get("spec") or {}
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        if c.get("name") != container:
            continue
        for var in c.get("env") or []:
            if var.get("name") == env:
                ref = (var.get("valueFrom") or {}).get("configMapKeyRef") or {}
                return (str(ref.get("name", "")), str(ref.get("key", ""))) if ref else None
    return None


def verify(
    *,
    owner: Owner,
    tokens: Sequence[str],
    pod: Mapping[str, Any],
    get_configmap: Callable[[str, str], KubeObject],
    node_name: str,
    inventory: Inventory,
    policy: PoolPolicy,
) -> RegisteredContainer:
    """Check the pod's allocation record entitles `owner` to start with `tokens` on this node."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    who = f"pod {owner.namespace}/{owner.pod}"
    raw = annotations.get(ANNOTATION_ALLOCATION)
    if not raw:
        raise PreStartRejected(
            f"{who} has no {ANNOTATION_ALLOCATION} record: tessera.dev/gpu-core pods must be scheduled by "
            "tessera-scheduler (check the Tessera webhook is running and set schedulerName)"
        )
    try:
        allocation = Allocation.from_json(raw)
    except (ValueError, KeyError, TypeError) as exc:
        raise PreStartRejected(f"{who} has an unreadable {ANNOTATION_ALLOCATION} record ({exc}); delete the pod to reschedule it") from exc
    if allocation.node != node_name:
        raise PreStartRejected(f"{who} was allocated GPUs on node {allocation.node!r}, not on this node {node_name!r}; delete the pod to reschedule it")
    shares = allocation.containers.get(owner.container)
    if not shares:
        raise PreStartRejected(f"{who}: container {owner.container!r} has no GPU share in the allocation record; delete the pod to reschedule it")
    asked = sum(s.core for s in shares)
    if asked != len(tokens):
        raise PreStartRejected(
            f"{who}: container {owner.container!r} holds {len(tokens)} gpu-core devices but its allocation record "
            f"grants {asked}; the record is stale — delete the pod to reschedule it"
        )
    for share in shares:
        gpu = inventory.by_uuid(share.uuid)
        if gpu is None or gpu.index != share.index:
            raise PreStartRejected(f"{who}: allocated GPU {share.index} ({share.uuid}) is not on this node; delete the pod to reschedule it")
        if not gpu.healthy:
            raise PreStartRejected(f"{who}: allocated GPU {share.index} ({share.uuid}) is unhealthy; delete the pod to reschedule it")
    _verify_configmap_env(who, owner, pod, allocation, get_configmap)
    app_class_text = annotations.get(ANNOTATION_APP_CLASS)
    app_class = AppClass(app_class_text) if app_class_text in {a.value for a in AppClass} else None
    return RegisteredContainer(
        pod_uid=PodUid(str(meta.get("uid", ""))),
        namespace=owner.namespace,
        pod_name=owner.pod,
        container=ContainerName(owner.container),
        shares=tuple(shares),
        app_class=app_class,
        policy=policy,
    )


def _verify_configmap_env(
    who: str, owner: Owner, pod: Mapping[str, Any], allocation: Allocation, get_configmap: Callable[[str, str], KubeObject]
) -> None:
    """The GPU the container will see comes from the allocation ConfigMap; make sure it is wired
    (else e.g. a CUDA image's NVIDIA_VISIBLE_DEVICES=all would expose every GPU) and agrees with
    the record."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    cm_name = annotations.get(ANNOTATION_ALLOCATION_CONFIGMAP)
    if not cm_name:
        raise PreStartRejected(f"{who} has no {ANNOTATION_ALLOCATION_CONFIGMAP} annotation: the Tessera webhook did not admit it; recreate the pod")
    expected_key = f"{owner.container}.{VISIBLE_DEVICES_ENV}"
    ref = _container_env_ref(pod, owner.container, VISIBLE_DEVICES_ENV)
    if ref != (cm_name, expected_key):
        raise PreStartRejected(
            f"{who}: container {owner.container!r} does not take {VISIBLE_DEVICES_ENV} from ConfigMap "
            f"{cm_name} key {expected_key}; the Tessera webhook did not admit it — recreate the pod"
        )
    try:
        data = get_configmap(owner.namespace, cm_name).get("data") or {}
    except Exception as exc:
        raise PreStartRejected(f"{who}: cannot read allocation ConfigMap {owner.namespace}/{cm_name} ({exc}); it is written at bind — delete the pod to reschedule it") from exc
    value = data.get(expected_key)
    shares = allocation.containers[owner.container]
    allowed = {",".join(s.uuid for s in shares), ",".join(str(s.index) for s in shares)}
    if value not in allowed:
        raise PreStartRejected(
            f"{who}: ConfigMap {cm_name} gives {expected_key}={value!r} but the allocation record names "
            f"{','.join(s.uuid for s in shares)}; delete the pod to reschedule it"
        )
