"""Where `tessera inspect` gets Node and Pod objects: a live cluster or a `kubectl` dump.

Both give plain JSON-shaped dicts exactly as the API server returns them (the same objects the
scheduler extender's cache is built from). Every failure is a `SourceError` whose message is one
line saying what went wrong and what to do next; callers print it, they never show a traceback.
"""
from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tessera.inspect.shape import ShapeError, check_node, check_pod, describe as _what
from tessera.kube.api import KubeApi, KubeApiError, KubeObject, TransportError

DUMP_COMMAND: Final = "kubectl get nodes,pods -A -o json"
_LIST_ITEM_KIND: Final = {"NodeList": "Node", "PodList": "Pod"}


class SourceError(Exception):
    """The objects could not be read; the message is one line for the user."""


@dataclass(frozen=True)
class ClusterObjects:
    """Nodes and pods of one cluster, and where they came from (shown in the output)."""

    nodes: tuple[KubeObject, ...]
    pods: tuple[KubeObject, ...]
    source: str


# --- files ----------------------------------------------------------------------------------------
_NESTED: Final = "nested too deeply to be a kubectl dump"


def _parse(text: str, name: str) -> Any:
    """JSON when the text looks like JSON (so its errors are JSON's, with line and column), else YAML."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SourceError(f"{name}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); expected the output of `{DUMP_COMMAND}`") from None
        except RecursionError:
            raise SourceError(f"{name}: {_NESTED}") from None
    import yaml  # `kubectl ... -o yaml` works too

    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        raise SourceError(f"{where}: not valid JSON or YAML ({exc.problem or exc.context}); expected the output of `{DUMP_COMMAND}`") from None
    except yaml.YAMLError as exc:
        raise SourceError(f"{name}: not valid JSON or YAML ({_first_line(exc)}); expected the output of `{DUMP_COMMAND}`") from None
    except RecursionError:
        raise SourceError(f"{name}: {_NESTED}") from None


def _checked(kind: str, obj: KubeObject, name: str, path: str) -> KubeObject:
    try:
        (check_node if kind == "Node" else check_pod)(obj, path)
    except ShapeError as exc:
        raise SourceError(f"{name}: {exc}") from None
    return obj


def _items(document: Any, name: str) -> Iterable[tuple[str, KubeObject]]:
    """(kind, object) of every item; a single Node or Pod object counts as a list of one."""
    if not isinstance(document, dict):
        raise SourceError(f"{name}: expected a Kubernetes List object, got {_what(document)}; dump with `{DUMP_COMMAND}`")
    kind = document.get("kind")
    if kind in ("Node", "Pod"):
        return [(kind, _checked(kind, document, name, ""))]
    items = document.get("items")
    if not isinstance(items, list):
        shown = f"kind {kind!r}" if kind else "no kind and no items"
        detail = f"; items is {_what(items)}, not a list" if "items" in document else ""
        raise SourceError(f"{name}: not a Kubernetes List ({shown}{detail}); dump with `{DUMP_COMMAND}`")
    out: list[tuple[str, KubeObject]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise SourceError(f"{name}: items[{i}]: expected an object, got {_what(item)}; dump with `{DUMP_COMMAND}`")
        item_kind = item.get("kind") or _LIST_ITEM_KIND.get(str(kind), "")
        if item_kind in ("Node", "Pod"):
            out.append((item_kind, _checked(item_kind, item, name, f"items[{i}]")))
    return out


def _decode(data: bytes, name: str) -> str:
    """UTF-8 (with or without a byte-order mark), or UTF-16 with its mark (PowerShell's `>`)."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise SourceError(f"{name}: starts like UTF-16 text but is not; expected the output of `{DUMP_COMMAND}`") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SourceError(
            f"{name}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); expected the output of `{DUMP_COMMAND}`"
        ) from None


def _read_text(path: str) -> tuple[str, str]:
    """(display name, text) of a file, `-` being standard input."""
    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)  # None when a test put a text stream there
        path, data = "<stdin>", stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
    else:
        data = _read_bytes(path)
    if not data.strip():
        raise SourceError(f"{path}: empty; expected the output of `{DUMP_COMMAND}`")
    return path, _decode(data, path)


def _read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file; create it with `{DUMP_COMMAND} > {path}`") from None
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory; pass the file written by `{DUMP_COMMAND}`") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read it ({exc.strerror or exc}); check the path and its permissions") from None


def from_documents(documents: Sequence[tuple[str, Any]], source: str) -> ClusterObjects:
    """Merge parsed dumps ((display name, document) pairs); a later object of the same name wins."""
    nodes: dict[str, KubeObject] = {}
    pods: dict[tuple[str, str], KubeObject] = {}
    for name, document in documents:
        for kind, obj in _items(document, name):
            meta = obj["metadata"]
            if kind == "Node":
                nodes[str(meta["name"])] = obj
            else:
                pods[(str(meta.get("namespace") or "default"), str(meta["name"]))] = obj
    if not nodes:
        names = ", ".join(name for name, _ in documents)
        raise SourceError(f"{names}: no Node objects; dump nodes and pods together with `{DUMP_COMMAND}`")
    return ClusterObjects(tuple(nodes.values()), tuple(pods.values()), source)


def load_files(paths: Sequence[str]) -> ClusterObjects:
    """Objects from one or more dump files (`-` = standard input)."""
    documents = []
    for path in paths:
        name, text = _read_text(path)
        documents.append((name, _parse(text, name)))
    return from_documents(documents, "file " + ", ".join(paths))


# --- a live cluster --------------------------------------------------------------------------------
_RBAC_HINT: Final = "inspect needs get/list on nodes and pods in all namespaces (see docs/operations.md, 'tessera inspect')"


def load_api(api: KubeApi, source: str = "cluster") -> ClusterObjects:
    """List every node and every pod (all namespaces) through the Kubernetes API adapter."""
    try:
        nodes = api.list_nodes()
        pods = api.list_pods()
    except KubeApiError as exc:
        raise SourceError(_api_error_line(exc)) from None
    except Exception as exc:  # urllib3 / socket errors: the client does not wrap them
        if not _is_connection_error(exc):
            raise
        raise SourceError(
            f"cannot reach the Kubernetes API server ({_connection_reason(exc)}); check the kubeconfig context and the network, "
            f"or inspect a dump with --from FILE"
        ) from None
    return ClusterObjects(tuple(nodes), tuple(pods), source)


def connect_and_load(kubeconfig: str | None, context: str | None) -> ClusterObjects:
    """Connect like kubectl does (in-cluster service account, else $KUBECONFIG, else ~/.kube/config;
    `kubeconfig`/`context` override) and list nodes and pods."""
    from tessera.kube.client import ClientSettings, KubernetesClientApi

    try:
        api = KubernetesClientApi.connect(ClientSettings(kubeconfig=kubeconfig, context=context))
    except KubeApiError as exc:
        raise SourceError(f"{_first_line(exc.message)}; or inspect a dump with --from FILE") from None
    except Exception as exc:  # a kubeconfig that is not YAML, or names a missing cert file
        raise SourceError(
            f"cannot load Kubernetes configuration ({type(exc).__name__}: {_first_line(exc)}); "
            "pass --kubeconfig PATH, or inspect a dump with --from FILE"
        ) from None
    where = ", ".join(part for part in (kubeconfig and f"kubeconfig {kubeconfig}", context and f"context {context}") if part)
    return load_api(api, f"cluster ({where})" if where else "cluster")


def _api_error_line(exc: KubeApiError) -> str:
    message = _first_line(exc.message)
    if exc.status in (401,):
        return f"the API server rejected the credentials (401: {message}); refresh the kubeconfig's token or certificate"
    if exc.status == 403:
        return f"the API server refused to list nodes or pods (403: {message}); {_RBAC_HINT}"
    if isinstance(exc, TransportError):  # no HTTP answer at all
        return f"cannot reach the Kubernetes API server ({message}); check the kubeconfig context and the network, or inspect a dump with --from FILE"
    if exc.status == 0:
        return f"{message}; check the kubeconfig, or inspect a dump with --from FILE"
    return f"listing nodes and pods failed ({exc.status}: {message}); retry, or inspect a dump with --from FILE"


def _is_connection_error(exc: Exception) -> bool:
    if isinstance(exc, OSError):
        return True
    try:
        from urllib3.exceptions import HTTPError
    except ImportError:  # pragma: no cover - urllib3 comes with the kubernetes client
        return False
    return isinstance(exc, HTTPError)


def _connection_reason(exc: Exception) -> str:
    """urllib3's reason without the connection object's repr ("<HTTPSConnection object at 0x..>: ")."""
    reason = _first_line(getattr(exc, "reason", None) or exc)
    return re.sub(r"^(<[^>]*>|None): ", "", reason)


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else "no detail"
