"""The Kubernetes REST API over a `FakeKubeApi`: which path is which call, and what it answers.

Paths, verbs, bodies and answers are those `tessera.kube.client.KubernetesClientApi` uses, as the
API server serves them. Read in kubernetes/kubernetes at v1.30.0 and v1.34.0 (staging k8s.io/apiserver
v0.30.0 / v0.34.0, pkg/endpoints/handlers: get.go `GetResource` / `ListResource`, create.go,
update.go, patch.go, watch.go; pkg/storage/cacher). Between the two the handlers gained CBOR
encoding behind the `CBORServingAndStorage` gate (JSON, all the client speaks, is unchanged) and
the watch cache was reworked to serve consistent lists, with the same list and 410 answers; the
one message that differs is in `tessera.kube.fake_leases`.

- single objects carry `kind` and `apiVersion`; list items do not, the list has
  `metadata.resourceVersion` (the store's revision: a watch from it misses nothing);
- a create answers 201 (`pods/binding` and `pods/eviction` answer a `Status` "Success" with
  code 201), an update 200, or 201 when it created the object (Leases);
- an error answers its `Status` (tessera.kube.fake_status), including 404 "the server could not
  find the requested resource" for a path the server does not have;
- list and watch take `labelSelector` (equality terms) and, for pods, `fieldSelector`
  `spec.nodeName=NAME`; a watch takes `resourceVersion` ("" or "0": the current objects as ADDED
  first, as the watch cache serves them) and `timeoutSeconds` (default 1800 s, upstream's
  `--min-request-timeout`; upstream adds a random 0-100 %).

What the client never sends is answered with a 4xx that says it is not emulated: other verbs,
patches of other fields, JSON patch and server-side apply, field selectors other than
spec.nodeName, selectors on watches, and patch preconditions on nodes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import parse_qs, urlsplit

from tessera.kube.api import KubeApiError, KubeObject
from tessera.kube.fake import FakeKubeApi
from tessera.kube.fake_status import (
    POD_BINDING,
    ApiStatus,
    FieldError,
    GroupResource,
    already_exists,
    bad_request,
    conflict,
    go_quote,
    invalid,
    stale,
    status_of,
)
from tessera.kube.loopback_faults import RequestKey, Verb

DEFAULT_WATCH_TIMEOUT_S: Final = 1800.0
_MERGE_PATCHES: Final = ("application/merge-patch+json", "application/strategic-merge-patch+json")
_COORDINATION: Final = "coordination.k8s.io"
# resource -> (group, namespaced, kind, apiVersion)
_RESOURCES: Final[dict[str, tuple[str, bool, str, str]]] = {
    "pods": ("", True, "Pod", "v1"),
    "nodes": ("", False, "Node", "v1"),
    "configmaps": ("", True, "ConfigMap", "v1"),
    "events": ("", True, "Event", "v1"),
    "leases": (_COORDINATION, True, "Lease", f"{_COORDINATION}/v1"),
}
_SERVED: Final[frozenset[tuple[str, str, Verb]]] = frozenset(
    {
        ("pods", "", "get"), ("pods", "", "list"), ("pods", "", "watch"), ("pods", "", "patch"),
        ("pods", "binding", "create"), ("pods", "eviction", "create"),
        ("nodes", "", "get"), ("nodes", "", "list"), ("nodes", "", "watch"), ("nodes", "", "patch"), ("nodes", "status", "patch"),
        ("configmaps", "", "create"), ("configmaps", "", "get"), ("configmaps", "", "update"),
        ("events", "", "create"),
        ("leases", "", "get"), ("leases", "", "create"), ("leases", "", "update"),
    }
)
_VERBS: Final[dict[str, Verb]] = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Answer:
    """A whole answer: a JSON body, or a plain-text one (the API server's 429 is plain text)."""

    status: int
    body: KubeObject | None = None
    text: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of(status: ApiStatus) -> Answer:
        return Answer(status.code, status.body())

    @staticmethod
    def of_error(exc: KubeApiError) -> Answer:
        return Answer.of(status_of(exc))


@dataclass(frozen=True)
class WatchPlan:
    """A watch to stream: `resource_version` None starts with the current objects."""

    resource: Literal["pods", "nodes"]
    resource_version: str | None
    timeout_s: float


def _no_such_path() -> Answer:
    return Answer(404, ApiStatus(404, "NotFound", "the server could not find the requested resource", {}).body())


def _created() -> Answer:
    """What pods/binding and pods/eviction answer: a `Status` "Success" with the create's code."""
    return Answer(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})


def parse(serial: int, method: str, target: str) -> RequestKey | Answer:
    """The request `method target` names, or the answer for a path or verb not served."""
    split = urlsplit(target)
    parts = [p for p in split.path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:3] == ["apis", _COORDINATION, "v1"]:
        group, rest = _COORDINATION, parts[3:]
    else:
        return _no_such_path()
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3 or rest[0] not in _RESOURCES or _RESOURCES[rest[0]][0] != group:
        return _no_such_path()
    resource, name, subresource = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
    namespaced = _RESOURCES[resource][1]
    if (namespace and not namespaced) or (namespaced and name and not namespace):
        return _no_such_path()
    if method == "GET":
        watch = (parse_qs(split.query).get("watch") or [""])[-1] in ("true", "1")
        verb: Verb = "get" if name else ("watch" if watch else "list")
    elif method in _VERBS:
        verb = _VERBS[method]
    else:
        return _not_served(f"{method} requests")
    if (resource, subresource, verb) not in _SERVED:
        what = f"{resource}/{subresource}" if subresource else resource
        return _not_served(f"{verb} on {what}")
    return RequestKey(serial, verb, resource, subresource, namespace, name, method, target)


def _not_served(what: str) -> Answer:
    message = f"the loopback API server does not serve {what} (Tessera's client never sends it)"
    return Answer(405, ApiStatus(405, "MethodNotAllowed", message, {}).body())


def group_resource(request: RequestKey) -> GroupResource:
    return GroupResource(_RESOURCES[request.resource][0], request.resource)


def typed(resource: str, obj: KubeObject) -> KubeObject:
    """`obj` with the `kind` and `apiVersion` the API server writes on single objects."""
    _, _, kind, api_version = _RESOURCES[resource]
    return {"kind": kind, "apiVersion": api_version, **{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}}


def retry_conflict(request: RequestKey, body: Any) -> KubeApiError:
    """The 409 a second copy of `request` sees once the first landed: AlreadyExists for a
    create, "already assigned" for a binding, a stale resourceVersion for the rest."""
    name = request.name
    if request.subresource == "binding":
        node = str(((body or {}).get("target") or {}).get("name") or "") if isinstance(body, dict) else ""
        return conflict(POD_BINDING, name, f"pod {name} is already assigned to node {go_quote(node)}")
    if request.verb == "create" and not request.subresource:
        meta = body.get("metadata") if isinstance(body, dict) else None
        return already_exists(group_resource(request), str((meta or {}).get("name") or ""))
    return stale(group_resource(request), name)


def apply(fake: FakeKubeApi, request: RequestKey, content_type: str, body: Any) -> Answer | WatchPlan:
    """Carry `request` out on `fake`; its errors are raised as `KubeApiError` (their `Status`
    is the answer)."""
    query = {k: v[-1] for k, v in parse_qs(urlsplit(request.path).query).items()}
    if request.verb in ("create", "update", "patch") and not isinstance(body, dict):
        raise bad_request(f"the object provided is unrecognized (must be of type {_RESOURCES[request.resource][2]}): the body is not a JSON object")
    if request.verb == "watch":
        return _watch(request, query)
    if request.verb == "list":
        return _list(fake, request, query)
    if request.verb == "patch":
        return Answer(200, typed(request.resource, _patch(fake, request, content_type, body)))
    return _write_or_get(fake, request, body)


def _write_or_get(fake: FakeKubeApi, request: RequestKey, body: Any) -> Answer:
    ns, name, resource = request.namespace, request.name, request.resource
    if request.verb == "get":
        getters = {"pods": lambda: fake.get_pod(ns, name), "nodes": lambda: fake.get_node(name),
                   "configmaps": lambda: fake.get_configmap(ns, name), "leases": lambda: fake.get_lease(ns, name)}
        return Answer(200, typed(resource, getters[resource]()))
    if request.subresource == "binding":
        meta = _dict(body.get("metadata"), "metadata")
        if meta.get("name") != name:
            raise bad_request("name in URL does not match name in Binding object")
        node = _dict(body.get("target"), "target").get("name")
        if not isinstance(node, str) or not node:
            raise invalid("Binding", "", name, [FieldError("target.name", "Required value", "", cause_type="FieldValueRequired")])
        fake.bind_pod(ns, name, str(meta.get("uid") or ""), node)
        return _created()
    if request.subresource == "eviction":
        if _dict(body.get("metadata"), "metadata").get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        preconditions = _dict(_dict(body.get("deleteOptions"), "deleteOptions").get("preconditions"), "deleteOptions.preconditions")
        fake.evict_pod(ns, name, preconditions.get("uid") or None)
        return _created()
    _check_namespace(body, ns, updating=request.verb == "update")
    if resource == "configmaps":
        if request.verb == "create":
            return Answer(201, typed(resource, fake.create_configmap(ns, body)))
        return Answer(200, typed(resource, fake.replace_configmap(ns, name, body)))
    if resource == "events":
        return Answer(201, typed(resource, fake.create_event(ns, body)))
    if request.verb == "create":
        return Answer(201, typed(resource, fake.create_lease(ns, body)))
    lease, created = fake.put_lease(ns, name, body)
    return Answer(201 if created else 200, typed(resource, lease))


def _dict(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"{path}: must be a JSON object")
    return value


def _check_namespace(body: KubeObject, namespace: str, *, updating: bool) -> None:
    """k8s.io/apiserver handlers/rest.go `checkName` (update) and registry/rest/meta.go
    `EnsureObjectNamespaceMatchesRequestNamespace` (create)."""
    sent = _dict(body.get("metadata"), "metadata").get("namespace")
    if sent and sent != namespace:
        if updating:
            raise bad_request(f"the namespace of the object ({sent}) does not match the namespace on the request ({namespace})")
        raise bad_request("the namespace of the provided object does not match the namespace sent on the request")


def _selectors(request: RequestKey, query: dict[str, str]) -> tuple[str | None, str | None]:
    """(spec.nodeName, labelSelector) of a list or watch."""
    node_name = None
    field_selector = query.get("fieldSelector") or ""
    if field_selector:
        key, sep, value = field_selector.partition("==") if "==" in field_selector else field_selector.partition("=")
        if request.resource != "pods" or key != "spec.nodeName" or not sep or "," in value:
            raise bad_request(f"the loopback API server filters pods by spec.nodeName=NAME only, not by {field_selector!r}")
        node_name = value
    return node_name, query.get("labelSelector") or None


def _list(fake: FakeKubeApi, request: RequestKey, query: dict[str, str]) -> Answer:
    node_name, labels = _selectors(request, query)
    if request.resource == "pods":
        items, version = fake.list_pods_and_version(node_name=node_name, label_selector=labels)
        if request.namespace:
            items = [p for p in items if (p.get("metadata") or {}).get("namespace") == request.namespace]
    else:
        items, version = fake.list_nodes_and_version(label_selector=labels)
    bare = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]
    kind = _RESOURCES[request.resource][2]
    return Answer(200, {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": version}, "items": bare})


def _watch(request: RequestKey, query: dict[str, str]) -> WatchPlan:
    if request.namespace or query.get("fieldSelector") or query.get("labelSelector"):
        raise bad_request("the loopback API server watches all pods or all nodes, without selectors or a namespace")
    version = query.get("resourceVersion") or ""
    if version not in ("", "0") and not version.isdigit():
        # k8s.io/apiserver pkg/storage/api_object_versioner.go `ParseResourceVersion`, rendered
        # by pkg/storage/errors/storage.go `InterpretWatchError`
        detail = f"strconv.ParseUint: parsing {go_quote(version)}: invalid syntax"
        raise invalid(request.resource, "", "", [FieldError("resourceVersion", "Invalid value", detail, go_quote(version))])
    timeout = query.get("timeoutSeconds") or ""
    if timeout and not timeout.isdigit():
        raise bad_request(f"timeoutSeconds: {timeout!r} is not a whole number of seconds")
    resource: Literal["pods", "nodes"] = "pods" if request.resource == "pods" else "nodes"
    return WatchPlan(resource, version if version not in ("", "0") else None, float(timeout) if timeout and int(timeout) else DEFAULT_WATCH_TIMEOUT_S)


def _patch(fake: FakeKubeApi, request: RequestKey, content_type: str, body: KubeObject) -> KubeObject:
    media = content_type.split(";")[0].strip().lower()
    if media not in _MERGE_PATCHES:
        raise bad_request(f"the loopback API server applies merge patches only ({', '.join(_MERGE_PATCHES)}), not {media or 'an untyped body'}")
    name = request.name
    if request.subresource == "status":
        status = _dict(body.get("status"), "status")
        capacity = _strings(status.get("capacity"), "status.capacity")
        allocatable = status.get("allocatable")
        if set(body) != {"status"} or set(status) - {"capacity", "allocatable"} or (allocatable is not None and allocatable != capacity):
            raise bad_request("the loopback API server patches status.capacity (and an equal status.allocatable) of nodes only")
        return fake.patch_node_status_capacity(name, {k: v for k, v in capacity.items() if v is not None})
    meta = _dict(body.get("metadata"), "metadata")
    allowed = {"annotations", "resourceVersion"} if request.resource == "pods" else {"annotations", "labels"}
    if set(body) - {"metadata"} or set(meta) - allowed or not set(meta) & {"annotations", "labels"}:
        raise bad_request(f"the loopback API server patches only {' and '.join(sorted(allowed))} of the metadata of {request.resource}")
    if request.resource == "pods":
        version = meta.get("resourceVersion")
        if version is not None and not isinstance(version, str):
            raise bad_request("metadata.resourceVersion: must be a string")
        annotations = _strings(meta.get("annotations"), "metadata.annotations")
        return fake.patch_pod_annotations(request.namespace, name, annotations, resource_version=version or None)
    # one write per map (labels first): the store has no patch of both at once
    patches = ((fake.patch_node_labels, "labels"), (fake.patch_node_annotations, "annotations"))
    return [patch(name, _strings(meta[key], f"metadata.{key}")) for patch, key in patches if key in meta][-1]


def _strings(value: Any, path: str) -> dict[str, str | None]:
    """A merge patch of a string map: strings set keys, null deletes them."""
    found = _dict(value, path)
    for key, item in found.items():
        if item is not None and not isinstance(item, str):
            raise bad_request(f"{path}[{json.dumps(key)}]: must be a string or null, got {json.dumps(item)[:40]}")
    return found
