"""kube-scheduler's extender wire types (`k8s.io/kube-scheduler/extender/v1`).

The Go structs carry no json tags, so the JSON keys are the Go field names: `Pod`, `Nodes`,
`NodeNames`, `FailedNodes`, `FailedAndUnresolvableNodes`, `Error`, `Host`, `Score`, `PodName`,
`PodNamespace`, `PodUID`, `Node`, and for preemption `NodeNameToVictims`, `NodeNameToMetaVictims`,
`Pods`, `UID`, `NumPDBViolations`. Go's decoder matches keys case-insensitively, so we read them
that way too, and always write the exact names. `Nodes` is a `v1.NodeList` (`{"items": [...]}`).
Decoding raises `WireError` with a message and the JSON path of the field, fit for an HTTP 400
reply. The Pod is checked against `tessera.kube.shape` (the fields the core reads, typed as in
core/v1); fields we do not know are ignored, as Go's decoder ignores them.

Source: kubernetes/kube-scheduler `extender/v1/types.go` at v0.30.0 (Kubernetes 1.30.0, the
version our stacks pin) and v0.36.3 (1.36.3, the newest release); the file is unchanged between
them for every type used here.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from itertools import repeat
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, NamedTuple, cast

from tessera.httpd import json_bytes, plain_strings, string_map_json
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

    def to_json_bytes(self) -> bytes:
        """`json_bytes(self.to_json())`, byte for byte, with the failure maps encoded by
        `string_map_json` (what a /filter over 10,000 candidates spends its encoding on)."""
        return b"".join(
            (
                b'{"Nodes":', json_bytes(None if self.nodes is None else {"items": self.nodes}),
                b',"NodeNames":', json_bytes(self.node_names),
                b',"FailedNodes":', string_map_json(self.failed_nodes),
                b',"FailedAndUnresolvableNodes":', string_map_json(self.failed_and_unresolvable_nodes),
                b',"Error":', json_bytes(self.error), b"}",
            )
        )

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


def host_priorities(names: Sequence[str], scores: Mapping[str, int], default: int = 0) -> list[HostPriority]:
    """`[HostPriority(n, scores.get(n, default)) for n in names]`, built in C: `tuple.__new__`
    over `map` skips the named tuple's Python-level constructor, which was most of building a
    reply of hundreds of feasible nodes."""
    return cast(list[HostPriority], list(map(tuple.__new__, repeat(HostPriority), zip(names, map(scores.get, names, repeat(default))))))


def host_priorities_json(priorities: list[HostPriority]) -> bytes:
    """/prioritize's reply, `json_bytes([p.to_json() for p in priorities])` byte for byte, the
    entries formatted directly when no node name needs escaping (a dict per feasible node and
    the generic encoder were a third of a 500-node reply's time)."""
    if not plain_strings([p.host for p in priorities]):
        return json_bytes([p.to_json() for p in priorities])
    return ("[" + ",".join([f'{{"Host":"{host}","Score":{score:d}}}' for host, score in priorities]) + "]").encode()


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
_CLOCK_EVERY: Final = 1024  # victims decoded between two looks at the clock (a look costs ~50 ns)


class _BudgetSpent(Exception):
    """/preempt's time budget ran out while its body was being decoded."""


def _count(data: Mapping[str, Any], name: str, where: str) -> int:
    value = _field(data, name)
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        raise WireError(f"must be a non-negative integer (int64), got {value!r}", f"{where}.{name}")
    return value


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
    def from_json(data: Any, where: str, *, meta: bool, deadline: float | None = None) -> Victims:
        """Linear in the number of victims (a set finds a UID listed twice). `deadline`: a
        `time.monotonic()` reading after which decoding gives up (`_BudgetSpent`)."""
        # kube-scheduler never sends a nil *Victims (it lists only nodes with victims): a null
        # entry is a body it did not write, not an empty set to answer for
        body = _object(data, where)
        listed = _field(body, "Pods")
        if listed is None:
            listed = []
        if not isinstance(listed, list):
            raise WireError(f"must be an array, got {_kind(listed)}", f"{where}.Pods")
        uids: list[str] = []
        seen: set[str] = set()
        pods: list[KubeObject] = []
        for i, entry in enumerate(listed):
            if deadline is not None and not i % _CLOCK_EVERY and time.monotonic() > deadline:
                raise _BudgetSpent
            if meta:
                if type(entry) is not dict:
                    _object(entry, f"{where}.Pods[{i}]")
                uid = _field(entry, "UID")
            else:
                pod = _pod(entry, f"{where}.Pods[{i}]")
                pods.append(pod)
                uid = pod["metadata"].get("uid")
            if not isinstance(uid, str) or not uid:
                uid_path = f"{where}.Pods[{i}].UID" if meta else f"{where}.Pods[{i}].metadata.uid"
                raise WireError("is required (every victim needs a UID, a non-empty string)", uid_path)
            if uid in seen:
                raise WireError(f"pod {uid} is listed twice", f"{where}.Pods[{i}]")
            seen.add(uid)
            uids.append(uid)
        return Victims(tuple(uids), _count(body, "NumPDBViolations", where), tuple(pods))

    def to_json(self) -> dict[str, Any]:
        return {"Pods": [{"UID": uid} for uid in self.uids], "NumPDBViolations": self.num_pdb_violations}


@dataclass(frozen=True)
class ExtenderPreemptionArgs:
    """Body of /preempt: the pod to place and, per candidate node, the victims kube-scheduler
    chose there. `meta` says which map carried them (True: `NodeNameToMetaVictims`).
    `budget_spent`: the time budget ran out before the body was decoded; `victims` is then empty
    and the answer must be an empty map (the preemption fails for this cycle, as kube-scheduler
    handles it)."""

    pod: KubeObject
    victims: dict[str, Victims]
    meta: bool = True
    budget_spent: bool = False

    FIELDS: ClassVar[tuple[str, ...]] = ("Pod", "NodeNameToVictims", "NodeNameToMetaVictims")

    @staticmethod
    def from_json(data: Any, deadline: float | None = None) -> ExtenderPreemptionArgs:
        """Linear in the body. `deadline`: a `time.monotonic()` reading; when decoding reaches
        it, the rest of the body is not read and the args say `budget_spent`."""
        body = _object(data, None)
        pod = _pod(_field(body, "Pod"), "Pod")
        by_key = {key: _field(body, key) for key in ("NodeNameToMetaVictims", "NodeNameToVictims")}
        sent = [key for key, value in by_key.items() if value is not None]
        if len(sent) > 1:
            raise WireError("send NodeNameToMetaVictims (nodeCacheCapable) or NodeNameToVictims, not both")
        key = sent[0] if sent else "NodeNameToMetaVictims"
        meta = key == "NodeNameToMetaVictims"
        victims: dict[str, Victims] = {}
        try:
            for node, entry in _object({} if by_key[key] is None else by_key[key], key).items():
                if deadline is not None and time.monotonic() > deadline:
                    raise _BudgetSpent
                victims[str(node)] = Victims.from_json(entry, f'{key}["{node}"]', meta=meta, deadline=deadline)
        except _BudgetSpent:
            return ExtenderPreemptionArgs(pod, {}, meta, budget_spent=True)
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
