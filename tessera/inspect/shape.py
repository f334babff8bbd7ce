"""Checking Node and Pod objects read from a dump file before `tessera inspect` reads them.

A `kubectl get nodes,pods -A -o json` dump that was edited by hand, truncated or produced by another
tool can hold a list where an object belongs, a number where a string belongs, or a quantity
Kubernetes would never accept. Every field `tessera.inspect.build` reads is checked here, and the
first wrong one is reported with its JSON path (`items[3].status.allocatable: ...`), so the user
gets one line naming the spot instead of a traceback. Fields inspect does not read are not checked.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import date
from typing import Any, Final

_IDENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Kubernetes' quantity grammar (apimachinery resource.Quantity): a signed decimal number, then an
# optional binary suffix, decimal suffix or exponent.
_QUANTITY: Final = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?")
_QUANTITY_HINT: Final = 'a Kubernetes quantity such as "8", "250m" or "16Gi"'


class ShapeError(ValueError):
    """`path: message`, path being a JSON path inside the file (e.g. `items[3].metadata.name`)."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def _key(path: str, key: object) -> str:
    name = str(key)
    if _IDENT.fullmatch(name):
        return f"{path}.{name}" if path else name
    return f'{path}["{name}"]'


def describe(value: object) -> str:
    """How a JSON/YAML value reads to a user: 'a list', 'the number 3', 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, date):
        return f"the date {value} (quote it in YAML)"
    return f"a {type(value).__name__}"


def _object(value: object, path: str, *, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise ShapeError(path, "is missing")
        return {}
    if not isinstance(value, Mapping):
        raise ShapeError(path, f"expected an object, got {describe(value)}")
    return value


def _list(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ShapeError(path, f"expected a list, got {describe(value)}")
    return value


def _string(value: object, path: str, *, required: bool = False) -> None:
    if value is None:
        if required:
            raise ShapeError(path, "is missing")
        return
    if not isinstance(value, str):
        raise ShapeError(path, f"expected a string, got {describe(value)}")
    if required and not value:
        raise ShapeError(path, "is empty")


def _strings(value: object, path: str) -> None:
    """Labels and annotations: an object of strings."""
    for key, item in _object(value, path).items():
        if not isinstance(item, str):
            raise ShapeError(_key(path, key), f"expected a string, got {describe(item)}")


def _quantity(value: object, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ShapeError(path, f"expected {_QUANTITY_HINT}, got {describe(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ShapeError(path, f"{value} is not a finite quantity")
    text = str(value).strip()
    if not _QUANTITY.fullmatch(text):
        raise ShapeError(path, f"{str(value)[:40]!r} is not {_QUANTITY_HINT}")
    if text.startswith("-"):
        raise ShapeError(path, f"{text!r} is negative; a resource amount cannot be")


def _quantities(value: object, path: str) -> None:
    for key, item in _object(value, path).items():
        _quantity(item, _key(path, key))


def _metadata(obj: Mapping[str, Any], path: str) -> None:
    meta = _object(obj.get("metadata"), _key(path, "metadata"), required=True)
    where = _key(path, "metadata")
    _string(meta.get("name"), _key(where, "name"), required=True)
    for field in ("namespace", "uid"):
        _string(meta.get(field), _key(where, field))
    _strings(meta.get("labels"), _key(where, "labels"))
    _strings(meta.get("annotations"), _key(where, "annotations"))


def _container(container: object, path: str) -> None:
    c = _object(container, path, required=True)
    _string(c.get("name"), _key(path, "name"))
    resources = _object(c.get("resources"), _key(path, "resources"))
    for field in ("requests", "limits"):
        _quantities(resources.get(field), _key(_key(path, "resources"), field))


def check_node(obj: Mapping[str, Any], path: str) -> None:
    """Raise `ShapeError` at the first field of a Node that inspect cannot read."""
    _metadata(obj, path)
    spec = _object(obj.get("spec"), _key(path, "spec"))
    if spec.get("unschedulable") is not None and not isinstance(spec.get("unschedulable"), bool):
        raise ShapeError(_key(_key(path, "spec"), "unschedulable"), f"expected true or false, got {describe(spec.get('unschedulable'))}")
    where = _key(path, "status")
    status = _object(obj.get("status"), where)
    for field in ("allocatable", "capacity"):
        _quantities(status.get(field), _key(where, field))
    for i, condition in enumerate(_list(status.get("conditions"), _key(where, "conditions"))):
        at = f"{_key(where, 'conditions')}[{i}]"
        c = _object(condition, at, required=True)
        _string(c.get("type"), _key(at, "type"))
        _string(c.get("status"), _key(at, "status"))


def check_pod(obj: Mapping[str, Any], path: str) -> None:
    """Raise `ShapeError` at the first field of a Pod that inspect cannot read."""
    _metadata(obj, path)
    where = _key(path, "spec")
    spec = _object(obj.get("spec"), where)
    _string(spec.get("nodeName"), _key(where, "nodeName"))
    for field in ("containers", "initContainers"):
        for i, container in enumerate(_list(spec.get(field), _key(where, field))):
            _container(container, f"{_key(where, field)}[{i}]")
    _quantities(spec.get("overhead"), _key(where, "overhead"))
    status = _object(obj.get("status"), _key(path, "status"))
    _string(status.get("phase"), _key(_key(path, "status"), "phase"))
