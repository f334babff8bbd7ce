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

from tessera.kube.api import KubeApi, KubeApiError, KubeObject

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
def _parse(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as json_error:
        import yaml  # `kubectl ... -o yaml` works too; JSON is tried first because it is much faster

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            raise SourceError(
                f"{name}: not JSON or YAML ({json_error}); expected the output of `{DUMP_COMMAND}`"
            ) from None


def _items(document: Any, name: str) -> Iterable[tuple[str, KubeObject]]:
    """(kind, object) of every item; a single Node or Pod object counts as a list of one."""
    if not isinstance(document, dict):
        raise SourceError(f"{name}: expected a Kubernetes List object, got {type(document).__name__}; dump with `{DUMP_COMMAND}`")
    kind = str(document.get("kind", ""))
    if kind in ("Node", "Pod"):
        return [(kind, document)]
    items = document.get("items")
    if not isinstance(items, list):
        shown = f"kind {kind!r}" if kind else "no kind and no items"
        raise SourceError(f"{name}: not a Kubernetes List ({shown}); dump with `{DUMP_COMMAND}`")
    out: list[tuple[str, KubeObject]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise SourceError(f"{name}: items[{i}] is not an object; dump with `{DUMP_COMMAND}`")
        item_kind = str(item.get("kind") or _LIST_ITEM_KIND.get(kind, ""))
        if item_kind in ("Node", "Pod"):
            if not isinstance(item.get("metadata"), dict) or not (item["metadata"].get("name")):
                raise SourceError(f"{name}: items[{i}] is a {item_kind} without metadata.name; is the file complete?")
            out.append((item_kind, item))
    return out


def _read_text(path: str) -> tuple[str, str]:
    """(display name, text) of a file, `-` being standard input."""
    if path == "-":
        return "<stdin>", sys.stdin.read()
    try:
        return path, Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file; create it with `{DUMP_COMMAND} > {path}`") from None
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory; pass the file written by `{DUMP_COMMAND}`") from None
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not a text file; expected the output of `{DUMP_COMMAND}`") from None
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
