"""The parts of Kubernetes objects Tessera reads, checked for type before anything reads them.

Objects reach us from outside as JSON (kube-scheduler's extender calls, AdmissionReviews). A real
peer sends what `k8s.io/api/core/v1` marshals; anyone else may send `"spec": []`. The shapes below
follow the Go types field for field (`staging/src/k8s.io/api/core/v1/types.go`) for the fields we
read, and leave the others alone: an object may carry any field we do not read (newer API
versions add fields; ignoring them is what Go's decoder does). `null` is accepted wherever Go
accepts it (it decodes to the zero value). Errors name the JSON path: `Pod.spec.containers[0].name:
must be a string, got int`.
"""
from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

INT64_MAX: Final = 2**63 - 1
# resource.Quantity's grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go): a signed
# decimal with a binary-SI, decimal-SI or exponent suffix. Bounded here (64 characters, 3-digit
# exponent) so that turning one into a number can never be the expensive part of a request.
_QUANTITY: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3}|[KMGTPE]i|[mkMGTPE])?")
_MAX_QUANTITY_CHARS: Final = 64


class ShapeError(ValueError):
    """A value of the wrong JSON type (or a malformed quantity) at `path`."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def child_path(path: str, key: str) -> str:
    """`Pod.metadata` + `name`; keys that are not identifiers in brackets: `limits["tessera.dev/gpu-core"]`."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}" if path else key
    return f'{path}["{key}"]'


class _Mismatch(Exception):
    """Raised inside a check with the path below the failing level, one segment added per level
    on the way out (`ShapeError` renders it): a pod of ~20 checked fields then builds no path
    string unless one is wrong (the extender checks two pods per scheduling cycle)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.below: list[str | int] = []  # innermost segment first


class Shape(ABC):
    def check(self, value: Any, path: str) -> None:
        """Raise ShapeError naming `path` (or a path below it) if `value` does not fit."""
        try:
            self._check(value)
        except _Mismatch as exc:
            for segment in reversed(exc.below):
                path = f"{path}[{segment}]" if type(segment) is int else child_path(path, str(segment))
            raise ShapeError(path, exc.message) from None

    @abstractmethod
    def _check(self, value: Any) -> None:
        """Raise `_Mismatch` (its `below` empty: the value itself) if `value` does not fit."""


class _Scalar(Shape):
    def __init__(self, name: str, accepts: Any) -> None:
        self.name = name
        self.accepts = accepts

    def _check(self, value: Any) -> None:
        if value is not None and not self.accepts(value):
            raise _Mismatch(f"must be {self.name}, got {_kind(value)}")


STRING: Final = _Scalar("a string", lambda v: type(v) is str)
BOOL: Final = _Scalar("a boolean", lambda v: type(v) is bool)
INT64: Final = _Scalar("an integer", lambda v: type(v) is int and -INT64_MAX - 1 <= v <= INT64_MAX)


class _Quantity(Shape):
    """A resource.Quantity: a string as above, or a JSON number (its UnmarshalJSON takes both)."""

    def _check(self, value: Any) -> None:
        if value is None:
            return
        if type(value) is int and abs(value) <= INT64_MAX:
            return
        if type(value) is float and math.isfinite(value):
            return
        if type(value) is not str:
            raise _Mismatch(f"must be a quantity (a string such as \"100\" or \"4Gi\"), got {_kind(value)}")
        if len(value) > _MAX_QUANTITY_CHARS or not _QUANTITY.fullmatch(value):
            raise _Mismatch(f"{value[:_MAX_QUANTITY_CHARS]!r} is not a Kubernetes quantity (such as \"100\", \"500m\", \"4Gi\")")


QUANTITY: Final = _Quantity()


@dataclass(frozen=True)
class ListOf(Shape):
    item: Shape

    def _check(self, value: Any) -> None:
        if value is None:
            return
        if type(value) is not list:
            raise _Mismatch(f"must be an array, got {_kind(value)}")
        check = self.item._check
        struct = isinstance(self.item, Struct)
        for index, item in enumerate(value):
            try:
                if item is None and struct:
                    # Go would decode it to an empty struct, but no API server stores a null list
                    # entry (a container without a name fails validation): refuse it rather than
                    # hand the core a container that is not there
                    raise _Mismatch("must be an object, got null")
                check(item)
            except _Mismatch as exc:
                exc.below.append(index)
                raise


@dataclass(frozen=True)
class MapOf(Shape):
    """A JSON object used as a Go map (labels, annotations, resource lists)."""

    value: Shape

    def _check(self, value: Any) -> None:
        if value is None:
            return
        if type(value) is not dict:
            raise _Mismatch(f"must be an object, got {_kind(value)}")
        check = self.value._check
        for key, item in value.items():
            try:
                check(item)
            except _Mismatch as exc:
                exc.below.append(key)
                raise


@dataclass(frozen=True)
class Struct(Shape):
    """A JSON object decoded into a Go struct: the fields we read are checked, others ignored."""

    fields: Mapping[str, Shape] = field(default_factory=dict)

    def _check(self, value: Any) -> None:
        if value is None:
            return
        if type(value) is not dict:
            raise _Mismatch(f"must be an object, got {_kind(value)}")
        for name, shape in self.fields.items():
            if name in value:
                try:
                    shape._check(value[name])
                except _Mismatch as exc:
                    exc.below.append(name)
                    raise


STRING_MAP: Final = MapOf(STRING)
RESOURCE_LIST: Final = MapOf(QUANTITY)

OBJECT_META: Final = Struct(
    {
        "name": STRING,
        "generateName": STRING,
        "namespace": STRING,
        "uid": STRING,
        "resourceVersion": STRING,
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    }
)
_RESOURCES: Final = Struct({"limits": RESOURCE_LIST, "requests": RESOURCE_LIST})
_ENV_VAR: Final = Struct({"name": STRING, "value": STRING, "valueFrom": Struct()})
CONTAINER: Final = Struct({"name": STRING, "image": STRING, "resources": _RESOURCES, "env": ListOf(_ENV_VAR)})
TOLERATION: Final = Struct({"key": STRING, "operator": STRING, "value": STRING, "effect": STRING, "tolerationSeconds": INT64})
_NODE_SELECTOR_REQUIREMENT: Final = Struct({"key": STRING, "operator": STRING, "values": ListOf(STRING)})
_NODE_SELECTOR_TERM: Final = Struct(
    {"matchExpressions": ListOf(_NODE_SELECTOR_REQUIREMENT), "matchFields": ListOf(_NODE_SELECTOR_REQUIREMENT)}
)
_NODE_AFFINITY: Final = Struct(
    {
        "requiredDuringSchedulingIgnoredDuringExecution": Struct({"nodeSelectorTerms": ListOf(_NODE_SELECTOR_TERM)}),
        "preferredDuringSchedulingIgnoredDuringExecution": ListOf(Struct({"weight": INT64, "preference": _NODE_SELECTOR_TERM})),
    }
)
POD_SPEC: Final = Struct(
    {
        "containers": ListOf(CONTAINER),
        "initContainers": ListOf(CONTAINER),
        "schedulerName": STRING,
        "nodeName": STRING,
        "nodeSelector": STRING_MAP,
        "tolerations": ListOf(TOLERATION),
        "affinity": Struct({"nodeAffinity": _NODE_AFFINITY}),
        "priority": INT64,
        "overhead": RESOURCE_LIST,
    }
)
POD: Final = Struct({"metadata": OBJECT_META, "spec": POD_SPEC, "status": Struct({"phase": STRING})})
NODE: Final = Struct(
    {"metadata": OBJECT_META, "status": Struct({"allocatable": RESOURCE_LIST, "capacity": RESOURCE_LIST})}
)


def check_pod(pod: Any, path: str) -> dict[str, Any]:
    """The pod, checked; it must be an object with `metadata` (every pod has one)."""
    POD.check(pod, path)
    if type(pod) is not dict:
        raise ShapeError(path, "is required (a Pod object)")
    if type(pod.get("metadata")) is not dict:
        raise ShapeError(child_path(path, "metadata"), "is required (an object)")
    return pod


def check_node(node: Any, path: str) -> dict[str, Any]:
    """The node, checked; it must have a `metadata.name`."""
    NODE.check(node, path)
    if type(node) is not dict:
        raise ShapeError(path, f"must be a Node object, got {_kind(node)}")
    meta = node.get("metadata")
    if type(meta) is not dict or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ShapeError(child_path(child_path(path, "metadata"), "name"), "is required")
    return node
