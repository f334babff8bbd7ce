"""kube-scheduler's extender wire types (`k8s.io/kube-scheduler/extender/v1`).

The Go structs carry no json tags, so the JSON keys are the Go field names: `Pod`, `Nodes`,
`NodeNames`, `FailedNodes`, `FailedAndUnresolvableNodes`, `Error`, `Host`, `Score`, `PodName`,
`PodNamespace`, `PodUID`, `Node`. Go's decoder matches keys case-insensitively, so we read them
that way too, and always write the exact names. `Nodes` is a `v1.NodeList` (`{"items": [...]}`).
Decoding raises `WireError` with a message and the JSON path of the field, fit for an HTTP 400
reply. The Pod is checked against `tessera.kube.shape` (the fields the core reads, typed as in
core/v1); fields we do not know are ignored, as Go's decoder ignores them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, NamedTuple

from tessera.kube.api import KubeObject
from tessera.kube.shape import INT64_MAX, ShapeError, check_pod

MIN_EXTENDER_PRIORITY: Final = 0
MAX_EXTENDER_PRIORITY: Final = 10  # kube-scheduler multiplies by weight and by 100/10


class WireError(ValueError):
    """The request body is not what kube-scheduler sends. `path` names the field in Go's
    spelling (`Pod.spec.containers[0].name`, `NodeNames[3]`); None when it is the whole body."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def _field(data: Mapping[str, Any], name: str) -> Any:
    """Go's encoding/json: exact match first, then case-insensitive."""
    if name in data:
        return data[name]
    lowered = name.lower()
    for key, value in data.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return None


def unknown_fields(data: Any, known: tuple[str, ...]) -> list[str]:
    """Top-level keys that match none of `known` (case-insensitively, as Go matches them). They
    are ignored, as Go's decoder ignores them: a newer kube-scheduler may send fields that this
    extender does not know (docs/scheduler-extender.md, "Request decoding")."""
    if not isinstance(data, Mapping):
        return []
    lowered = {k.lower() for k in known}
    return sorted(str(k) for k in data if str(k).lower() not in lowered)


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(type(value), "null")


def _object(data: Any, path: str | None) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        what = "must be a JSON object" if path else "the request body must be a JSON object"
        raise WireError(f"{what}, got {_kind(data)}", path)
    return data


def _string(data: Mapping[str, Any], name: str, *, required: bool) -> str:
    value = _field(data, name)
    if value is None:
        if required:
            raise WireError("is required", name)
        return ""
    if not isinstance(value, str):
        raise WireError(f"must be a string, got {_kind(value)}", name)
    return value


def _int64(value: Any, path: str) -> int:
    if value is None:
        return 0
    if type(value) is not int or not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise WireError(f"must be an integer (int64), got {_kind(value)}", path)
    return value


def _pod(value: Any, path: str) -> KubeObject:
    if value is None:
        raise WireError("is required (the Pod being scheduled)", path)
    try:
        return dict(check_pod(value, path))
    except ShapeError as exc:
        raise WireError(exc.message, exc.path) from None


def _node_name(node: Any, path: str) -> str:
    """Only the name of a node in `Nodes.items` is read (the cache has the rest)."""
    if not isinstance(node, Mapping):
        raise WireError(f"must be a Node object, got {_kind(node)}", path)
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise WireError("is required (every node in Nodes.items needs one)", f"{path}.metadata.name")
    return name


@dataclass(frozen=True)
class ExtenderArgs:
    """Body of /filter and /prioritize. Exactly one of `nodes` (full objects, when the extender
    is not nodeCacheCapable) and `node_names` (when it is) is normally set."""

    pod: KubeObject
    nodes: list[KubeObject] | None = None
    node_names: list[str] | None = None

    FIELDS: ClassVar[tuple[str, ...]] = ("Pod", "Nodes", "NodeNames")

    @staticmethod
    def from_json(data: Any) -> ExtenderArgs:
        body = _object(data, None)
        pod = _pod(_field(body, "Pod"), "Pod")
        nodes_field = _field(body, "Nodes")
        nodes: list[KubeObject] | None = None
        if nodes_field is not None:
            items = _object(nodes_field, "Nodes").get("items")
            if items is None:
                items = []
            if not isinstance(items, list):
                raise WireError(f"must be an array of Node objects, got {_kind(items)}", "Nodes.items")
            for index, node in enumerate(items):
                _node_name(node, f"Nodes.items[{index}]")
            nodes = [dict(n) for n in items]
        names_field = _field(body, "NodeNames")
        node_names: list[str] | None = None
        if names_field is not None:
            if not isinstance(names_field, list):
                raise WireError(f"must be an array of node names, got {_kind(names_field)}", "NodeNames")
            # set(map(type)) checks 1000s of names ~10x faster than all(isinstance(...))
            if not set(map(type, names_field)) <= {str}:
                index = next(i for i, n in enumerate(names_field) if type(n) is not str)
                raise WireError(f"must be a string (a node name), got {_kind(names_field[index])}", f"NodeNames[{index}]")
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

    FIELDS: ClassVar[tuple[str, ...]] = ("PodName", "PodNamespace", "PodUID", "Node")

    @staticmethod
    def from_json(data: Any) -> ExtenderBindingArgs:
        body = _object(data, None)
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

    FIELDS: ClassVar[tuple[str, ...]] = ("Pod", "NodeNameToVictims", "NodeNameToMetaVictims")

    @staticmethod
    def from_json(data: Any) -> ExtenderPreemptionArgs:
        body = _object(data, None)
        pod = _pod(_field(body, "Pod"), "Pod")
        victims: dict[str, list[str]] = {}
        pdb: dict[str, int] = {}
        for key, meta in (("NodeNameToVictims", False), ("NodeNameToMetaVictims", True)):
            per_node = _field(body, key)
            if per_node is None:
                continue
            for node, entry in _object(per_node, key).items():
                entry_path = f'{key}["{node}"]'
                entry = {} if entry is None else _object(entry, entry_path)  # Go: a nil *Victims
                pods = _field(entry, "Pods")
                if pods is None:
                    pods = []
                if not isinstance(pods, list):
                    raise WireError(f"must be an array, got {_kind(pods)}", f"{entry_path}.Pods")
                victims[str(node)] = [_victim_uid(victim, f"{entry_path}.Pods[{i}]", meta) for i, victim in enumerate(pods)]
                pdb[str(node)] = _int64(_field(entry, "NumPDBViolations"), f"{entry_path}.NumPDBViolations")
        return ExtenderPreemptionArgs(pod, victims, pdb)


def _victim_uid(victim: Any, path: str, meta: bool) -> str:
    """A MetaPod's `UID`, or a full victim Pod's `metadata.uid`."""
    if meta:
        uid = _field(_object(victim, path), "UID")
        uid_path = f"{path}.UID"
    else:
        uid = _pod(victim, path)["metadata"].get("uid")
        uid_path = f"{path}.metadata.uid"
    if not isinstance(uid, str) or not uid:
        raise WireError("is required (every victim needs a UID)", uid_path)
    return uid


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
