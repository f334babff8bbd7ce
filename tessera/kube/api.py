"""The one seam between Tessera and the Kubernetes API.

Everything that reads or writes cluster state goes through `KubeApi`. `tessera.kube.fake` holds an
in-memory implementation (with watch streams) used by tests, `--simulate` modes and benchmarks;
`tessera.kube.client` is the real adapter over the official `kubernetes` client. Objects are plain
JSON-shaped dicts exactly as the API server returns them (camelCase keys), so the core never
depends on a client library's model classes.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

KubeObject = dict[str, Any]
WatchEventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class WatchEvent:
    type: WatchEventType
    object: KubeObject


class KubeApiError(Exception):
    """An API call failed; `status` is the HTTP status (409 conflict, 404 not found, ...)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Conflict(KubeApiError):
    def __init__(self, message: str) -> None:
        super().__init__(409, message)


class NotFound(KubeApiError):
    def __init__(self, message: str) -> None:
        super().__init__(404, message)


class KubeApi(Protocol):
    # --- pods ---
    def get_pod(self, namespace: str, name: str) -> KubeObject: ...
    def list_pods(self, *, node_name: str | None = None, label_selector: str | None = None) -> list[KubeObject]: ...
    def list_pods_and_version(
        self, *, node_name: str | None = None, label_selector: str | None = None
    ) -> tuple[list[KubeObject], str]:
        """Like `list_pods`, plus the list's resourceVersion to start a watch from (informer
        semantics: no event between the list and the watch is lost)."""
        ...

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, resource_version: str | None = None
    ) -> KubeObject:
        """Merge-patch annotations (None deletes a key). With `resource_version`, fails with
        `Conflict` when the pod changed since it was read (optimistic concurrency)."""
        ...

    def bind_pod(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        """POST pods/{name}/binding. Raises `Conflict` if the pod is already bound."""
        ...

    def evict_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        """POST pods/{name}/eviction (policy/v1): delete the pod unless a PodDisruptionBudget
        forbids it now, which is a `KubeApiError` with status 429 (retry later). With `uid`, a
        pod of the same name but another UID is left alone (`Conflict`); `NotFound` when gone."""
        ...

    # --- nodes ---
    def get_node(self, name: str) -> KubeObject: ...
    def list_nodes(self, *, label_selector: str | None = None) -> list[KubeObject]: ...
    def list_nodes_and_version(self, *, label_selector: str | None = None) -> tuple[list[KubeObject], str]: ...
    def patch_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> KubeObject: ...
    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> KubeObject: ...
    def patch_node_status_capacity(self, name: str, capacity: Mapping[str, str]) -> KubeObject:
        """Set extended resources in status.capacity (and allocatable) of a node."""
        ...

    # --- config maps, events ---
    def create_configmap(self, namespace: str, body: KubeObject) -> KubeObject: ...
    def get_configmap(self, namespace: str, name: str) -> KubeObject: ...
    def replace_configmap(self, namespace: str, name: str, body: KubeObject) -> KubeObject:
        """PUT a ConfigMap; with `metadata.resourceVersion` in `body`, `Conflict` when stale."""
        ...

    def create_event(self, namespace: str, body: KubeObject) -> KubeObject: ...

    # --- watches ---
    # A watch without `resource_version` starts with synthetic ADDED events for every existing
    # object; with one, it replays what happened after it (410 `KubeApiError` when too old).
    # It ends after `stop_after_s` (the caller re-watches from the last resourceVersion it saw).
    def watch_pods(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]: ...
    def watch_nodes(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]: ...
