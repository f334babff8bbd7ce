"""JSON in and out of Tessera's HTTP endpoints, and the one error shape they all answer with.

Every reply that is not a success carries `Content-Type: application/json` and the body

    {"error": "<what is wrong and what to send instead>", "path": "<JSON path into the request body, or null>"}

`path` names the offending field (`Pod.spec.containers[0].name`, `request.uid`) when the problem
is one field, and is null for problems of the request as a whole (not JSON, too large, unknown
URL, wrong method).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any, Final

from tessera.httpd.framing import HttpError, Response

_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate, \\ud800 to \\udfff: half of a valid pair, or a lone one."""
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
"""A surrogate left in a decoded string: the decoder joins every valid pair into one character."""
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

MAX_JSON_DEPTH: Final = 100
"""Nesting a request body may have. The deepest Kubernetes object we receive (a Pod with its
managedFields) nests about 15 levels; the limit keeps every later walk of the body (copies,
re-encoding) far from Python's recursion limit."""


def error_body(message: str, path: str | None = None) -> bytes:
    return json.dumps({"error": message, "path": path}).encode()


def json_bytes(payload: Any) -> bytes:
    # ensure_ascii (the default): a lone surrogate from a request (`"\ud800"` is valid JSON)
    # cannot break the UTF-8 encoding of the reply.
    return json.dumps(payload, separators=(",", ":")).encode()


# characters that JSON writes as themselves in a string (all of a Kubernetes object name's)
_PLAIN: Final = re.compile(r"[A-Za-z0-9._:/-]*")


def plain_strings(strings: Iterable[str]) -> bool:
    """Whether JSON writes every one of `strings` as itself between quotes (no escapes): then a
    reply may format them directly, byte for byte what `json_bytes` would write."""
    return _PLAIN.fullmatch("".join(strings)) is not None


def string_map_json(values: Mapping[str, str]) -> bytes:
    """`json_bytes(values)`, byte for byte, for a map with few distinct values (a /filter reply's
    FailedNodes: 10,000 node names, one of five messages each). Escaping the same message again
    for every node was most of the reply's encoding time; here each distinct value is encoded
    once, and the keys are written as they are when none needs escaping (else: `json_bytes`)."""
    if not values:
        return b"{}"
    distinct = set(values.values())
    if len(distinct) > 16 or not plain_strings(values):
        return json_bytes(dict(values))
    encoded = {v: json.dumps(v) for v in distinct}
    return ("{" + ",".join([f'"{k}":{encoded[v]}' for k, v in values.items()]) + "}").encode()


def json_response(status: int, payload: Any) -> Response:
    return Response(status, json_bytes(payload))


def error_response(status: int, message: str, path: str | None = None, headers: Sequence[tuple[str, str]] = ()) -> Response:
    return Response(status, error_body(message, path), headers=tuple(headers))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def parse_json(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Decode a request body (RFC 8259: UTF-8, no NaN/Infinity); raise HttpError 400 saying
    where it is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"request body is not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}"
        ) from None
    if not text.strip():
        raise HttpError(HTTPStatus.BAD_REQUEST, "request body is empty; send a JSON object")
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"request body nests deeper than {max_depth} levels") from None
    except ValueError as exc:  # NaN/Infinity, 1e999, integers over Python's digit limit
        raise HttpError(HTTPStatus.BAD_REQUEST, f"request body is not valid JSON: {exc}") from None
    if not within_depth(value, max_depth):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"request body nests deeper than {max_depth} levels")
    if _SURROGATE_ESCAPE.search(raw):  # nearly never: the whole cost of the check is this search
        path = lone_surrogate_path(value)
        if path is not None:
            raise HttpError(
                HTTPStatus.BAD_REQUEST,
                f"{path or 'request body'}: string holds a lone surrogate escape (\\ud800-\\udfff without its pair); send valid Unicode",
                path=path or None,
            )
    return value


def lone_surrogate_path(value: Any) -> str | None:
    """The JSON path of the first string (or object key) holding a lone UTF-16 surrogate, "" for
    the body itself, None when there is none.

    RFC 8259 (section 8.2) lets a JSON text escape a lone surrogate, and Python's decoder keeps
    it, but no string of the Kubernetes API holds one: Go's encoding/json (golang/go,
    `src/encoding/json/encode.go`, `appendString`, go1.22) writes valid UTF-8 and replaces
    invalid bytes with U+FFFD, so kube-scheduler and the API server never send one. Such a
    string cannot be encoded as UTF-8 later (a label, a log line, a Kubernetes API call), so it
    is refused here, where the path can still be named. Iterative, with each container's strings
    tested in one regex search; paths are built only for the culprit."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, chain = stack.pop()
        kind = type(item)
        if kind is str:
            if _SURROGATE.search(item):
                return _render(chain)
            continue
        if kind is not dict and kind is not list:
            continue
        children = item.values() if kind is dict else item
        kinds = set(map(type, children))
        if _SURROGATE.search(_strings(item, children, kinds)):
            entries = item.items() if kind is dict else enumerate(item)
            for key, child in entries:
                if (type(key) is str and _SURROGATE.search(key)) or (type(child) is str and _SURROGATE.search(child)):
                    return _render((chain, key))
        if dict in kinds or list in kinds:
            entries = item.items() if kind is dict else enumerate(item)
            nested = [(child, (chain, key)) for key, child in entries if type(child) is dict or type(child) is list]
            stack.extend(reversed(nested))
    return None


def _strings(container: Any, children: Any, kinds: set[type]) -> str:
    """A container's keys and string values as one string, joined in C when they are all
    strings (a list of 10,000 node names)."""
    keys = "".join(container) if type(container) is dict else ""
    if kinds == {str}:
        return keys + "".join(children)
    if str not in kinds:
        return keys
    return keys + "".join([c for c in children if type(c) is str])


def _render(chain: tuple[Any, ...]) -> str:
    """A path from the (parent, key) chain `lone_surrogate_path` builds, in the form the decoders
    use: `Pod.metadata.name`, `Pods[0]`, `limits["tessera.dev/gpu-core"]`."""
    keys: list[Any] = []
    while chain:
        chain, key = chain
        keys.append(key)
    path = ""
    for key in reversed(keys):
        if isinstance(key, int):
            path += f"[{key}]"
        elif _IDENTIFIER.fullmatch(key):
            path = f"{path}.{key}" if path else key
        else:
            path += f"[{json.dumps(key)}]"
    return path


def within_depth(value: Any, max_depth: int) -> bool:
    """Iterative (a recursive walk is what the limit protects against); visits containers only,
    and a container holding none (a list of 10,000 node names) costs one pass in C."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return False
        children = item.values() if type(item) is dict else item if type(item) is list else ()
        kinds = set(map(type, children))
        if dict not in kinds and list not in kinds:
            continue
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
    return True
