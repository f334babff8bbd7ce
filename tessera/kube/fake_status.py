"""The API server's error answers, as `metav1.Status` objects with upstream's reasons and messages.

`FakeKubeApi` raises these so that in-process callers get the same exception types as through the
real client (`Conflict`, `NotFound`, `KubeApiError` with the status), and `tessera.kube.loopback`
writes the very same `Status` body on the wire. Constructors follow k8s.io/apimachinery
`pkg/api/errors/errors.go` (kubernetes/apimachinery tags v0.30.0 and v0.34.0, i.e. Kubernetes
v1.30.0 and v1.34.0; the functions used here are identical in both): `NewNotFound`,
`NewAlreadyExists`, `NewConflict`, `NewInvalid`, `NewBadRequest`, `NewResourceExpired`,
`NewTooManyRequests`, `NewInternalError`, `NewServiceUnavailable`, `NewTimeoutError`,
`NewRequestEntityTooLargeError`. `details` is left out where upstream's pointer is nil, and is
`{}` where upstream sets a details struct whose fields are all empty (`omitempty`).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from tessera.kube.api import Conflict, KubeApiError, KubeObject, NotFound

Reason = Literal[
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Invalid",
    "BadRequest",
    "Expired",
    "TooManyRequests",
    "InternalError",
    "ServiceUnavailable",
    "Timeout",
    "RequestEntityTooLarge",
    "MethodNotAllowed",
    "UnsupportedMediaType",
    "",
]

# k8s.io/apiserver pkg/registry/generic/registry/store.go (v0.30.0, v0.34.0): the cause of every
# Conflict answered to a write whose metadata.resourceVersion is not the stored one
OPTIMISTIC_LOCK: Final = "the object has been modified; please apply your changes to the latest version and try again"
# k8s.io/apiserver pkg/endpoints/handlers/finisher/finisher.go: what a write whose handler outlived
# its deadline answers, while the storage transaction it started may still commit
HANDLER_TIMEOUT: Final = "request did not complete within requested timeout - context deadline exceeded"
REQUEST_BODY_LIMIT: Final = 3 * 1024 * 1024  # k8s.io/apiserver pkg/server/config.go MaxRequestBodyBytes


@dataclass(frozen=True)
class GroupResource:
    """`schema.GroupResource`: printed `resource.group`, or `resource` for the core group."""

    group: str
    resource: str

    def __str__(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


PODS: Final = GroupResource("", "pods")
POD_BINDING: Final = GroupResource("", "pods/binding")
NODES: Final = GroupResource("", "nodes")
CONFIGMAPS: Final = GroupResource("", "configmaps")
EVENTS: Final = GroupResource("", "events")
LEASES: Final = GroupResource("coordination.k8s.io", "leases")


def go_quote(text: str) -> str:
    """Go's `%q` for the names and values that appear in messages (JSON escaping agrees with Go's
    for printable text, which is all an object name may hold)."""
    return json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True)
class ApiStatus:
    """A failed `metav1.Status`; `details` None leaves the field out, as upstream's nil pointer does."""

    code: int
    reason: Reason
    message: str
    details: Mapping[str, Any] | None = field(default=None)

    def body(self) -> KubeObject:
        """The JSON the API server writes, keys in Go's field order."""
        status: KubeObject = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message}
        if self.reason:
            status["reason"] = self.reason
        if self.details is not None:
            status["details"] = dict(self.details)
        status["code"] = self.code
        return status

    def error(self) -> KubeApiError:
        """The exception a `KubeApi` caller sees for this answer."""
        if self.code == 404:
            return StatusNotFound(self)
        if self.code == 409:
            return StatusConflict(self)
        return StatusFailure(self)


class StatusNotFound(NotFound):
    def __init__(self, status: ApiStatus) -> None:
        super().__init__(status.message)
        self.api_status = status


class StatusConflict(Conflict):
    def __init__(self, status: ApiStatus) -> None:
        super().__init__(status.message)
        self.api_status = status


class StatusFailure(KubeApiError):
    def __init__(self, status: ApiStatus) -> None:
        super().__init__(status.code, status.message)
        self.api_status = status


_GENERIC_REASONS: Final[dict[int, Reason]] = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_of(exc: KubeApiError) -> ApiStatus:
    """The `Status` to answer for `exc`: its own when it carries one, else the generic reason of
    its code (upstream's `ErrorToAPIStatus` leaves the reason empty for codes it has none for)."""
    if isinstance(exc, (StatusNotFound, StatusConflict, StatusFailure)):
        return exc.api_status
    return ApiStatus(exc.status, _GENERIC_REASONS.get(exc.status, ""), exc.message)


def _details(resource: GroupResource, name: str) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name}
    if resource.group:
        found["group"] = resource.group
    found["kind"] = resource.resource
    return found


def not_found(resource: GroupResource, name: str) -> StatusNotFound:
    return StatusNotFound(ApiStatus(404, "NotFound", f"{resource} {go_quote(name)} not found", _details(resource, name)))


def already_exists(resource: GroupResource, name: str) -> StatusConflict:
    return StatusConflict(ApiStatus(409, "AlreadyExists", f"{resource} {go_quote(name)} already exists", _details(resource, name)))


def conflict(resource: GroupResource, name: str, cause: str) -> StatusConflict:
    message = f"Operation cannot be fulfilled on {resource} {go_quote(name)}: {cause}"
    return StatusConflict(ApiStatus(409, "Conflict", message, _details(resource, name)))


def stale(resource: GroupResource, name: str) -> StatusConflict:
    """A write carrying a metadata.resourceVersion that is no longer the stored one."""
    return conflict(resource, name, OPTIMISTIC_LOCK)


def uid_precondition_failed(resource: GroupResource, namespace: str | None, name: str, wanted: str, actual: str) -> StatusConflict:
    """A write whose UID precondition names another object: k8s.io/apiserver pkg/storage
    interfaces.go `Preconditions.Check` raises a StorageError (errors.go `Error()` renders it) that
    pkg/storage/errors/storage.go `InterpretUpdateError` turns into a Conflict. The key is the etcd
    key under the default `/registry` prefix."""
    key = f"/registry/{resource.resource}/{namespace}/{name}" if namespace else f"/registry/{resource.resource}/{name}"
    cause = (
        f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, "
        f"AdditionalErrorMsg: Precondition failed: UID in precondition: {wanted}, UID in object meta: {actual}"
    )
    return conflict(resource, name, cause)


@dataclass(frozen=True)
class FieldError:
    """One `field.Error`: `path: Type: value: detail` as its `Error()` renders it."""

    path: str
    type: Literal["Invalid value", "Required value", "Forbidden"]
    detail: str
    value: str | None = None  # already rendered as upstream renders the bad value; None: not shown
    cause_type: Literal["FieldValueInvalid", "FieldValueRequired", "FieldValueForbidden"] = "FieldValueInvalid"

    def body(self) -> str:
        text = self.type if self.value is None else f"{self.type}: {self.value}"
        return f"{text}: {self.detail}" if self.detail else text


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> StatusFailure:
    """422 `NewInvalid`: `Kind.group "name" is invalid: [e1, e2]` (one error: without brackets)."""
    qualified = f"{kind}.{group}" if group else kind
    rendered = [f"{e.path}: {e.body()}" for e in errors]
    listed = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{"reason": e.cause_type, "message": e.body(), "field": e.path} for e in errors]
    return StatusFailure(ApiStatus(422, "Invalid", f"{qualified} {go_quote(name)} is invalid: {listed}", details))


def bad_request(message: str) -> StatusFailure:
    return StatusFailure(ApiStatus(400, "BadRequest", message))


def expired(message: str) -> StatusFailure:
    """410 Gone, as the watch cache answers a resourceVersion older than its history."""
    return StatusFailure(ApiStatus(410, "Expired", message))


def too_many_requests(message: str, retry_after_s: int = 0) -> StatusFailure:
    details = {"retryAfterSeconds": retry_after_s} if retry_after_s else {}
    return StatusFailure(ApiStatus(429, "TooManyRequests", message, details))


def internal_error(cause: str) -> StatusFailure:
    return StatusFailure(ApiStatus(500, "InternalError", f"Internal error occurred: {cause}", {"causes": [{"message": cause}]}))


def service_unavailable(message: str) -> StatusFailure:
    return StatusFailure(ApiStatus(503, "ServiceUnavailable", message))


def timeout(message: str) -> StatusFailure:
    return StatusFailure(ApiStatus(504, "Timeout", f"Timeout: {message}", {}))


def entity_too_large(limit: int) -> StatusFailure:
    return StatusFailure(ApiStatus(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}"))
