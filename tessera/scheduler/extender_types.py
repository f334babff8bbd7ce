"""kube-scheduler's extender wire types (`k8s.io/kube-scheduler/extender/v1`).

The Go structs carry no json tags, so the JSON keys are the Go field names: `Pod`, `Nodes`,
`NodeNames`, `FailedNodes`, `FailedAndUnresolvableNodes`, `Error`, `Host`, `Score`, `PodName`,
`PodNamespace`, `PodUID`, `Node`, and for preemption `NodeNameToVictims`, `NodeNameToMetaVictims`,
`Pods`, `UID`, `NumPDBViolations`. Go's decoder matches keys case-insensitively, so we read them
that way too, and always write the exact names. `Nodes` is a `v1.NodeList` (`{"items": [...]}`).
Decoding raises `WireError` with a message fit for an HTTP 400 reply.

Source: kubernetes/kube-scheduler `extender/v1/types.go` at v0.30.0 (Kubernetes 1.30.0, the
version our stacks pin) and v0.36.3 (1.36.3, the newest release); the file is unchanged between
them for every type used here.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from tessera.kube.api import KubeObject

MIN_EXTENDER_PRIORITY: Final = 0
MAX_EXTENDER_PRIORITY: Final = 10  # kube-scheduler multiplies by weight and by 100/10


class WireError(ValueError):
    """The request body is not what kube-scheduler sends."""


def _field(data: Mapping[str, Any], name: str) -> Any:
    """Go's encoding/json: exact match first, then case-insensitive."""
    if name in data:
        return data[name]
    lowered = name.lower()
    for key, value in data.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return None


def _object(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise WireError(f"{what} must be a JSON object, got {type(data).__name__}")
    return data


def _string(data: Mapping[str, Any], name: str, *, required: bool) -> str:
    value = _field(data, name)
    if value is None:
        if required:
            raise WireError(f"field {name} is required")
        return ""
    if not isinstance(value, str):
        raise WireError(f"field {name} must be a string, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class ExtenderArgs:
    """Body of /filter and /prioritize. Exactly one of `nodes` (full objects, when the extender
    is not nodeCacheCapable) and `node_names` (when it is) is normally set."""

    pod: KubeObject
    nodes: list[KubeObject] | None = None
    node_names: list[str] | None = None

    @staticmethod
    def from_json(data: Any) -> ExtenderArgs:
        body = _object(data, "ExtenderArgs")
        pod = _field(body, "Pod")
        if pod is None:
            raise WireError("field Pod is required")
        pod = dict(_object(pod, "Pod"))
        if not isinstance(pod.get("metadata"), Mapping):
            raise WireError("Pod.metadata must be an object")
        nodes_field = _field(body, "Nodes")
        nodes: list[KubeObject] | None = None
        if nodes_field is not None:
            items = _object(nodes_field, "Nodes").get("items")
            if items is None:
                items = []
            if not isinstance(items, list) or not all(isinstance(n, Mapping) for n in items):
                raise WireError("Nodes.items must be a list of Node objects")
            nodes = [dict(n) for n in items]
            for node in nodes:
                meta = node.get("metadata")
                if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
                    raise WireError("every node in Nodes.items needs metadata.name")
        names_field = _field(body, "NodeNames")
        node_names: list[str] | None = None
        if names_field is not None:
            # set(map(type)) checks 1000s of names ~10x faster than all(isinstance(...))
            if not isinstance(names_field, list) or not set(map(type, names_field)) <= {str}:
                raise WireError("NodeNames must be a list of strings")
            node_names = list(names_field)
        return ExtenderArgs(pod, nodes, node_names)

    def candidate_names(self) -> list[str]:
        if self.node_names is not None:
            return self.node_names
        return [str(n["metadata"]["name"]) for n in self.nodes or []]

    def to_json(self) -> dict[str, Any]:
        return {
            "Pod": self.pod,
            "Nodes": None if self.nodes is None else {"items": self.nodes},
            "NodeNames": self.node_names,
        }


@dataclass(frozen=True)
class ExtenderFilterResult:
    """Reply of /filter. Answer in the form asked: names for NodeNames, objects for Nodes."""

    nodes: list[KubeObject] | None = None
    node_names: list[str] | None = None
    failed_nodes: dict[str, str] = field(default_factory=dict)
    failed_and_unresolvable_nodes: dict[str, str] = field(default_factory=dict)
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "Nodes": None if self.nodes is None else {"items": self.nodes},
            "NodeNames": self.node_names,
            "FailedNodes": self.failed_nodes,
            "FailedAndUnresolvableNodes": self.failed_and_unresolvable_nodes,
            "Error": self.error,
        }

    @staticmethod
    def from_json(data: Any) -> ExtenderFilterResult:
        body = _object(data, "ExtenderFilterResult")
        nodes_field = _field(body, "Nodes")
        nodes = None if nodes_field is None else list(_object(nodes_field, "Nodes").get("items") or [])
        names = _field(body, "NodeNames")
        return ExtenderFilterResult(
            nodes=nodes,
            node_names=None if names is None else [str(n) for n in names],
            failed_nodes=dict(_field(body, "FailedNodes") or {}),
            failed_and_unresolvable_nodes=dict(_field(body, "FailedAndUnresolvableNodes") or {}),
            error=_string(body, "Error", required=False),
        )


class HostPriority(NamedTuple):
    """One entry of /prioritize's reply (a JSON list of these). A named tuple, not a frozen
    dataclass: a reply has one per feasible node and this is ~5x cheaper to build."""

    host: str
    score: int

    def to_json(self) -> dict[str, Any]:
        return {"Host": self.host, "Score": self.score}

    @staticmethod
    def from_json(data: Any) -> HostPriority:
        body = _object(data, "HostPriority")
        score = _field(body, "Score")
        if not isinstance(score, int):
            raise WireError("HostPriority.Score must be an integer")
        return HostPriority(_string(body, "Host", required=True), score)


@dataclass(frozen=True)
class ExtenderBindingArgs:
    """Body of /bind."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @staticmethod
    def from_json(data: Any) -> ExtenderBindingArgs:
        body = _object(data, "ExtenderBindingArgs")
        return ExtenderBindingArgs(
            pod_name=_string(body, "PodName", required=True),
            pod_namespace=_string(body, "PodNamespace", required=True),
            pod_uid=_string(body, "PodUID", required=False),
            node=_string(body, "Node", required=True),
        )

    def to_json(self) -> dict[str, Any]:
        return {"PodName": self.pod_name, "PodNamespace": self.pod_namespace, "PodUID": self.pod_uid, "Node": self.node}


@dataclass(frozen=True)
class ExtenderBindingResult:
    """Reply of /bind; an empty `Error` means the pod is bound."""

    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"Error": self.error}


# --- preemption ---------------------------------------------------------------------------------
# Upstream (identical in kubernetes/kube-scheduler v0.30.0 = Kubernetes 1.30.0 and v0.36.3 = 1.36.3,
# `extender/v1/types.go`):
#   ExtenderPreemptionArgs{Pod *v1.Pod; NodeNameToVictims map[string]*Victims;
#                          NodeNameToMetaVictims map[string]*MetaVictims}
#   Victims{Pods []*v1.Pod; NumPDBViolations int64}   MetaVictims{Pods []*MetaPod; NumPDBViolations int64}
#   MetaPod{UID string}                                ExtenderPreemptionResult{NodeNameToMetaVictims}
# kube-scheduler fills only NodeNameToMetaVictims when the extender is nodeCacheCapable, else only
# NodeNameToVictims; Go marshals the unset map as `null` (no omitempty). Whatever the extender
# answers, kube-scheduler reads NodeNameToMetaVictims and looks every UID up among the pods of
# that node in its own snapshot (kubernetes/kubernetes pkg/scheduler/extender.go,
# `ProcessPreemption` / `convertToVictims` / `convertPodUIDToPod`).
_INT64_MAX: Final = 2**63 - 1


def _count(data: Mapping[str, Any], name: str, where: str) -> int:
    value = _field(data, name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT64_MAX:
        raise WireError(f"{where}.{name} must be a non-negative integer, got {value!r}")
    return value


def _pod_object(data: Any, where: str) -> KubeObject:
    pod = dict(_object(data, where))
    if not isinstance(pod.get("metadata"), Mapping):
        raise WireError(f"{where}.metadata must be an object")
    return pod


@dataclass(frozen=True)
class Victims:
    """The pods to evict on one node (`MetaVictims`, or `Victims` with whole pods) and how many
    of them kube-scheduler counted as violating a PodDisruptionBudget.

    `uids` in kube-scheduler's order (most important first: it reads `Pods[0]` as the victim of
    highest priority); `pods` holds the whole pods when they came as `Victims` (not nodeCacheCapable)."""

    uids: tuple[str, ...]
    num_pdb_violations: int = 0
    pods: tuple[KubeObject, ...] = ()

    @staticmethod
    def from_json(data: Any, where: str, *, meta: bool) -> Victims:
        body = _object(data, where)
        listed = _field(body, "Pods")
        if listed is None:
            listed = []
        if not isinstance(listed, list):
            raise WireError(f"{where}.Pods must be a list")
        uids: list[str] = []
        pods: list[KubeObject] = []
        for i, entry in enumerate(listed):
            item = f"{where}.Pods[{i}]"
            if meta:
                uid = _field(_object(entry, item), "UID")
            else:
                pod = _pod_object(entry, item)
                pods.append(pod)
                uid = pod["metadata"].get("uid")
            if not isinstance(uid, str) or not uid:
                raise WireError(f"{item}: every victim needs a UID (a non-empty string)")
            if uid in uids:
                raise WireError(f"{item}: pod {uid} is listed twice")
            uids.append(uid)
        return Victims(tuple(uids), _count(body, "NumPDBViolations", where), tuple(pods))

    def to_json(self) -> dict[str, Any]:
        return {"Pods": [{"UID": uid} for uid in self.uids], "NumPDBViolations": self.num_pdb_violations}


@dataclass(frozen=True)
class ExtenderPreemptionArgs:
    """Body of /preempt: the pod to place and, per candidate node, the victims kube-scheduler
    chose there. `meta` says which map carried them (True: `NodeNameToMetaVictims`)."""

    pod: KubeObject
    victims: dict[str, Victims]
    meta: bool = True

    @staticmethod
    def from_json(data: Any) -> ExtenderPreemptionArgs:
        body = _object(data, "ExtenderPreemptionArgs")
        pod_field = _field(body, "Pod")
        if pod_field is None:
            raise WireError("field Pod is required")
        pod = _pod_object(pod_field, "Pod")
        by_key = {key: _field(body, key) for key in ("NodeNameToMetaVictims", "NodeNameToVictims")}
        sent = [key for key, value in by_key.items() if value is not None]
        if len(sent) > 1:
            raise WireError("send NodeNameToMetaVictims (nodeCacheCapable) or NodeNameToVictims, not both")
        key = sent[0] if sent else "NodeNameToMetaVictims"
        meta = key == "NodeNameToMetaVictims"
        victims = {
            str(node): Victims.from_json(entry, f"{key}[{node}]", meta=meta)
            for node, entry in _object(by_key[key] or {}, key).items()
        }
        return ExtenderPreemptionArgs(pod, victims, meta)

    def to_json(self) -> dict[str, Any]:
        """As kube-scheduler marshals it: the map it did not fill is `null`."""
        meta = {node: v.to_json() for node, v in self.victims.items()} if self.meta else None
        full = None
        if not self.meta:
            full = {node: {"Pods": list(v.pods), "NumPDBViolations": v.num_pdb_violations} for node, v in self.victims.items()}
        return {"Pod": self.pod, "NodeNameToVictims": full, "NodeNameToMetaVictims": meta}


@dataclass(frozen=True)
class ExtenderPreemptionResult:
    """Reply of /preempt: per node that stays a candidate, the victims to evict there. A node
    left out is no longer a candidate; a node kept always has at least one victim (kube-scheduler
    fails the whole preemption of a non-ignorable extender that returns a node with none)."""

    victims: dict[str, Victims]

    def to_json(self) -> dict[str, Any]:
        return {"NodeNameToMetaVictims": {node: v.to_json() for node, v in self.victims.items()}}
