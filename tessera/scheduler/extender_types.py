"""kube-scheduler's extender wire types (`k8s.io/kube-scheduler/extender/v1`).

The Go structs carry no json tags, so the JSON keys are the Go field names: `Pod`, `Nodes`,
`NodeNames`, `FailedNodes`, `FailedAndUnresolvableNodes`, `Error`, `Host`, `Score`, `PodName`,
`PodNamespace`, `PodUID`, `Node`. Go's decoder matches keys case-insensitively, so we read them
that way too, and always write the exact names. `Nodes` is a `v1.NodeList` (`{"items": [...]}`).
Decoding raises `WireError` with a message fit for an HTTP 400 reply.
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


@dataclass(frozen=True)
class ExtenderPreemptionArgs:
    """Body of /preempt: the victims kube-scheduler picked per node, as pod UIDs. With
    nodeCacheCapable it sends `NodeNameToMetaVictims` ({"Pods": [{"UID"}], "NumPDBViolations"});
    otherwise `NodeNameToVictims` with full pods; both are read."""

    pod: KubeObject
    victims: dict[str, list[str]]
    pdb_violations: dict[str, int]

    @staticmethod
    def from_json(data: Any) -> ExtenderPreemptionArgs:
        body = _object(data, "ExtenderPreemptionArgs")
        pod = _field(body, "Pod")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("metadata"), Mapping):
            raise WireError("field Pod with metadata is required")
        victims: dict[str, list[str]] = {}
        pdb: dict[str, int] = {}
        for key, meta in (("NodeNameToVictims", False), ("NodeNameToMetaVictims", True)):
            per_node = _field(body, key)
            if per_node is None:
                continue
            for node, entry in _object(per_node, key).items():
                entry = _object(entry, f"{key}[{node}]")
                pods = _field(entry, "Pods") or []
                if not isinstance(pods, list):
                    raise WireError(f"{key}[{node}].Pods must be a list")
                uids = []
                for victim in pods:
                    victim = _object(victim, "victim pod")
                    uid = _field(victim, "UID") if meta else (_object(victim.get("metadata") or {}, "metadata").get("uid"))
                    if not isinstance(uid, str):
                        raise WireError(f"{key}[{node}]: every victim needs a UID")
                    uids.append(uid)
                victims[str(node)] = uids
                pdb[str(node)] = int(_field(entry, "NumPDBViolations") or 0)
        return ExtenderPreemptionArgs(dict(pod), victims, pdb)


@dataclass(frozen=True)
class ExtenderPreemptionResult:
    """Reply of /preempt: the nodes where evicting the victims makes room, with those victims."""

    victims: dict[str, list[str]]
    pdb_violations: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "NodeNameToMetaVictims": {
                node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": self.pdb_violations.get(node, 0)}
                for node, uids in self.victims.items()
            }
        }
