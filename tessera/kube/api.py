"""The one seam between Tessera and the Kubernetes API.

Everything that reads or writes cluster state goes through `KubeApi`. `tessera.kube.fake` holds an
in-memory implementation (with watch streams) used by tests, `--simulate` modes and benchmarks;
`tessera.kube.client` is the real adapter over the official `kubernetes` client;
`tessera.kube.loopback` serves the in-memory one as the REST API on 127.0.0.1, with injectable
faults, for tests and benchmarks that drive the real client. Objects are plain
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


class TransportError(KubeApiError):
    """No HTTP answer: the connection was refused, reset or closed, or the request timed out.
    A write that ends so may or may not have been applied (`may_have_applied`).

    The real client raises it for every such failure (urllib3 and socket errors, read timeouts,
    an answer or a watch stream cut short, a 2xx whose body is not JSON), never another exception
    type, with a message that names the call: `patch pod ns/p: no answer from the API server: ...`.
    `status` is 0."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


def may_have_applied(exc: KubeApiError) -> bool:
    """Whether a failed write may still have taken effect on the API server.

    True for no answer at all (`TransportError`: the request may have been received and
    committed, or may still be in flight) and for 5xx (the API server may fail after its storage
    committed, e.g. a 504 from a timed-out handler whose etcd transaction went through). False for
    4xx: the API server answers those before it writes (admission, validation, a stale
    resourceVersion precondition, rate limiting). Callers resolve a True by reading back.
    """
    return isinstance(exc, TransportError) or exc.status >= 500


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

    # --- leases (coordination.k8s.io/v1), for leader election ---
    def get_lease(self, namespace: str, name: str) -> KubeObject:
        """`NotFound` when there is none."""
        ...

    def create_lease(self, namespace: str, body: KubeObject) -> KubeObject:
        """`Conflict` (409 AlreadyExists) when one of that name exists."""
        ...

    def replace_lease(self, namespace: str, name: str, body: KubeObject) -> KubeObject:
        """PUT; with `metadata.resourceVersion` in `body`, `Conflict` when it is stale."""
        ...

    # --- Dynamic Resource Allocation (resource.k8s.io/v1), for the DRA kubelet plugin and the extender's dra scores ---
    def get_resource_claim(self, namespace: str, name: str) -> KubeObject:
        """`NotFound` when there is none."""
        ...

    def list_resource_claims(self) -> list[KubeObject]:
        """ResourceClaims of every namespace (the extender's dra scores count their allocations)."""
        ...

    def list_resource_slices(self, *, node_name: str | None = None, driver: str | None = None) -> list[KubeObject]:
        """ResourceSlices (cluster-scoped), filtered by the field selectors `spec.nodeName` and
        `spec.driver` the API server supports for them."""
        ...

    def list_resource_claims_and_version(self) -> tuple[list[KubeObject], str]:
        """`list_resource_claims` plus the list's resourceVersion (to watch from)."""
        ...

    def list_resource_slices_and_version(self, *, driver: str | None = None) -> tuple[list[KubeObject], str]:
        """The ResourceSlices of `driver` (every driver's when None) plus the list's resourceVersion."""
        ...

    def create_resource_slice(self, body: KubeObject) -> KubeObject:
        """POST; `metadata.generateName` instead of a name lets the server pick one. `Conflict`
        (409 AlreadyExists) for a taken name."""
        ...

    def replace_resource_slice(self, name: str, body: KubeObject) -> KubeObject:
        """PUT; with `metadata.resourceVersion` in `body`, `Conflict` when it is stale; `NotFound`
        when the slice is gone."""
        ...

    def delete_resource_slice(self, name: str) -> None:
        """`NotFound` when there is none."""
        ...

    # --- watches ---
    # A watch without `resource_version` starts with synthetic ADDED events for every existing
    # object; with one, it replays what happened after it (410 `KubeApiError` when too old).
    # It ends after `stop_after_s` (the caller re-watches from the last resourceVersion it saw).
    def watch_pods(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]: ...
    def watch_nodes(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]: ...
    def watch_resource_claims(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]: ...
    def watch_resource_slices(
        self, *, driver: str | None = None, resource_version: str | None = None, stop_after_s: float | None = None
    ) -> Iterator[WatchEvent]: ...
