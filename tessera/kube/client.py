"""`KubeApi` over the official `kubernetes` Python client.

Thin adapter: every call asks the client for the raw response (`_preload_content=False`) and
returns the API server's JSON as a dict, so objects keep their camelCase keys and no generated
model class leaks into the core. An HTTP error answer becomes `Conflict` (409), `NotFound` (404)
or `KubeApiError` with its status and the server's message. A failure without an HTTP answer (no
connection, a connection refused, reset or closed, a read timeout, a body or watch stream cut
short, a 2xx whose body is not JSON) becomes `TransportError`, whose message names the call:
callers that wrote resolve it by reading back (`tessera.kube.api.may_have_applied`).

Each request is sent at most once. urllib3's default (`Retry.DEFAULT`, 3 tries, which the
`kubernetes` package uses when `Configuration.retries` is None) re-sends a PUT or GET after a read
error or read timeout, re-sends any method after other errors, and re-sends a PUT or GET answered
429/503 with Retry-After; a PUT re-sent after its first copy committed can land twice, or answer
the caller with the second copy's 409. So `connect` installs `REQUEST_RETRIES`: only a connection
that could not be opened is tried again (up to twice, 0.1-0.2 s apart: urllib3 counts those as
connect errors, raised before any byte of the request is written); a read error, a timeout
after the request was written, any status and any redirect reach the caller as they are.

Lease writes are sent as the caller's JSON, not through the generated `V1Lease` model:
the model's round trip rewrites `spec.renewTime` / `spec.acquireTime` with Python's
`isoformat()`, which drops the fraction when the microseconds are 0 (`...T10:00:00+00:00`), and
the API server parses those fields with `RFC3339Micro`, six fractional digits exactly
(k8s.io/apimachinery pkg/apis/meta/v1/micro_time.go, `UnmarshalJSON`): such a write is a 400.
"""
from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import urllib3
import yaml
from urllib3.util.retry import Retry

from tessera.kube.api import Conflict, KubeApiError, KubeObject, NotFound, TransportError, WatchEvent

_MERGE_PATCH: Final = "application/merge-patch+json"
_JSON: Final = "application/json"
_TRANSPORT: Final = (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)
REQUEST_RETRIES: Final = Retry(
    total=None,
    connect=2,
    read=False,
    other=0,
    status=0,
    redirect=0,
    status_forcelist=(),
    respect_retry_after_header=False,
    raise_on_redirect=False,
    raise_on_status=False,
    backoff_factor=0.1,
)


@dataclass(frozen=True)
class ClientSettings:
    """Where the API server is.

    kubeconfig: path to a kubeconfig file; default None = in-cluster service account when running
        in a pod, else the default kubeconfig (~/.kube/config), like kubectl.
    context: kubeconfig context; default None = the file's current context.
    request_timeout_s: per request; default 10 s, so a stuck API server fails a bind instead of
        hanging kube-scheduler's bind goroutine forever. A watch reads with `stop_after_s` plus
        this long before it gives up on a silent connection.
    """

    kubeconfig: str | None = None
    context: str | None = None
    request_timeout_s: float = 10.0
    kubeconfig_text: str | None = None
    """The kubeconfig itself (a Pulumi secret), instead of a file; never written to disk."""


def _cause(exc: BaseException) -> str:
    """The innermost reason of a urllib3 error, in one line."""
    reason = getattr(exc, "reason", None)
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(reason, BaseException):
        exc = reason
    if isinstance(exc, urllib3.exceptions.ProtocolError) and len(exc.args) > 1 and isinstance(exc.args[1], BaseException):
        inner = exc.args[1]
        return f"{exc.args[0]} ({type(inner).__name__}: {inner})"
    return f"{type(exc).__name__}: {exc}"


def _no_answer(what: str, exc: BaseException) -> TransportError:
    return TransportError(f"{what}: no answer from the API server: {_cause(exc)}")


def status_error(status: int, body: bytes | str | None, fallback: str = "") -> KubeApiError:
    """The typed error of an HTTP error answer: the `Status` message when the body is one, else
    the body's text (a proxy's or the API server's plain-text 429), else `fallback`."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    message = text.strip() or fallback
    try:
        document = json.loads(text) if text else None
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("message"), str):
        message = document["message"]
    return _typed(status, message)


def _typed(status: int, message: str) -> KubeApiError:
    if status == 409:
        return Conflict(message)
    if status == 404:
        return NotFound(message)
    return KubeApiError(status, message)


class KubernetesClientApi:
    """The real `KubeApi`; construct with `connect(settings)`."""

    def __init__(self, api_client: Any, settings: ClientSettings) -> None:
        from kubernetes import client

        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._coordination = client.CoordinationV1Api(api_client)
        self._settings = settings

    @staticmethod
    def connect(settings: ClientSettings) -> KubernetesClientApi:
        """Load the configuration `settings` names and build a client sending each request once."""
        from kubernetes import client, config

        configuration = client.Configuration()
        try:
            if settings.kubeconfig_text is not None:
                document = yaml.safe_load(settings.kubeconfig_text)
                if not isinstance(document, dict):
                    raise config.ConfigException("the kubeconfig text is not a YAML mapping")
                config.load_kube_config_from_dict(document, context=settings.context, client_configuration=configuration)
            elif settings.kubeconfig is None and settings.context is None and _in_cluster(configuration):
                pass
            else:
                config.load_kube_config(config_file=settings.kubeconfig, context=settings.context, client_configuration=configuration)
        except (config.ConfigException, OSError, yaml.YAMLError) as exc:
            raise KubeApiError(0, f"cannot load Kubernetes configuration: {exc}; pass --kubeconfig PATH or run in a pod") from exc
        configuration.retries = REQUEST_RETRIES
        return KubernetesClientApi(client.ApiClient(configuration), settings)

    # --- the three ways a call goes out -------------------------------------------------------------
    def _open(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The undecoded urllib3 response of a 2xx answer."""
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            if not exc.status:  # the client's own wrapping of a TLS failure: no answer either
                raise TransportError(f"{what}: no answer from the API server: {exc.reason}") from exc
            raise status_error(int(exc.status), exc.body, str(exc.reason or "")) from exc
        except _TRANSPORT as exc:
            raise _no_answer(what, exc) from exc

    def _read(self, what: str, response: Any) -> KubeObject:
        try:
            data = response.data
        except _TRANSPORT as exc:
            raise TransportError(f"{what}: the answer was cut short: {_cause(exc)}") from exc
        finally:
            response.release_conn()
        try:
            parsed = json.loads(data) if data else {}
        except ValueError as exc:
            raise TransportError(f"{what}: the answer is not JSON: {data[:80]!r}") from exc
        if not isinstance(parsed, dict):
            raise TransportError(f"{what}: the answer is not a JSON object: {data[:80]!r}")
        return parsed

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> KubeObject:
        response = self._open(what, fn, *args, _request_timeout=self._settings.request_timeout_s, **kwargs)
        return self._read(what, response)

    def _send(
        self, what: str, method: str, path: str, path_params: dict[str, str], body: KubeObject | None, *, query: list[tuple[str, str]] | None = None
    ) -> KubeObject:
        """A request with `body` as it is (no model round trip); same outcomes as `_call`."""
        return self._read(what, self._request(what, method, path, path_params, body, query or [], self._settings.request_timeout_s))

    def _request(
        self, what: str, method: str, path: str, path_params: dict[str, str], body: KubeObject | None, query: list[tuple[str, str]], timeout: Any
    ) -> Any:
        """The undecoded urllib3 response of a 2xx answer to a request by path."""
        from kubernetes.client.exceptions import ApiException

        request = self._client.param_serialize(
            method=method, resource_path=path, path_params=path_params, query_params=query,
            header_params={"Accept": _JSON, "Content-Type": _JSON}, body=body, auth_settings=["BearerToken"],
        )
        try:
            answer = self._client.call_api(*request, _request_timeout=timeout)
        except ApiException as exc:
            raise TransportError(f"{what}: no answer from the API server: {exc.reason}") from exc
        except _TRANSPORT as exc:
            raise _no_answer(what, exc) from exc
        if 200 <= answer.status <= 299:
            return answer.response
        try:
            data = answer.response.data
        except _TRANSPORT as exc:
            raise TransportError(f"{what}: the {answer.status} answer was cut short: {_cause(exc)}") from exc
        finally:
            answer.response.release_conn()
        raise status_error(answer.status, data, str(answer.reason or ""))

    # --- pods -----------------------------------------------------------------------------------
    def get_pod(self, namespace: str, name: str) -> KubeObject:
        return self._call(f"get pod {namespace}/{name}", self._core.read_namespaced_pod, name, namespace)

    def list_pods(self, *, node_name: str | None = None, label_selector: str | None = None) -> list[KubeObject]:
        return self.list_pods_and_version(node_name=node_name, label_selector=label_selector)[0]

    def list_pods_and_version(
        self, *, node_name: str | None = None, label_selector: str | None = None
    ) -> tuple[list[KubeObject], str]:
        field_selector = f"spec.nodeName={node_name}" if node_name else None
        data = self._call("list pods", self._core.list_pod_for_all_namespaces, field_selector=field_selector, label_selector=label_selector)
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, resource_version: str | None = None
    ) -> KubeObject:
        # a JSON merge patch carrying metadata.resourceVersion is rejected with 409 when stale
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return self._call(
            f"patch pod {namespace}/{name}", self._core.patch_namespaced_pod, name, namespace, {"metadata": metadata}, _content_type=_MERGE_PATCH
        )

    def bind_pod(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        self._call(f"bind pod {namespace}/{name} to {node_name}", self._core.create_namespaced_pod_binding, name, namespace, body)

    def evict_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        from kubernetes import client

        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
        body = client.V1Eviction(
            api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name=name, namespace=namespace), delete_options=options
        )
        self._call(f"evict pod {namespace}/{name}", self._core.create_namespaced_pod_eviction, name, namespace, body)

    # --- nodes ----------------------------------------------------------------------------------
    def get_node(self, name: str) -> KubeObject:
        return self._call(f"get node {name}", self._core.read_node, name)

    def list_nodes(self, *, label_selector: str | None = None) -> list[KubeObject]:
        return self.list_nodes_and_version(label_selector=label_selector)[0]

    def list_nodes_and_version(self, *, label_selector: str | None = None) -> tuple[list[KubeObject], str]:
        data = self._call("list nodes", self._core.list_node, label_selector=label_selector)
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    def patch_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> KubeObject:
        body = {"metadata": {"annotations": dict(annotations)}}
        return self._call(f"patch node {name}", self._core.patch_node, name, body, _content_type=_MERGE_PATCH)

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> KubeObject:
        return self._call(f"patch node {name}", self._core.patch_node, name, {"metadata": {"labels": dict(labels)}}, _content_type=_MERGE_PATCH)

    def patch_node_status_capacity(self, name: str, capacity: Mapping[str, str]) -> KubeObject:
        body = {"status": {"capacity": dict(capacity), "allocatable": dict(capacity)}}
        return self._call(f"patch node {name} status", self._core.patch_node_status, name, body, _content_type=_MERGE_PATCH)

    # --- config maps, events --------------------------------------------------------------------
    def create_configmap(self, namespace: str, body: KubeObject) -> KubeObject:
        name = (body.get("metadata") or {}).get("name")
        return self._call(f"create configmap {namespace}/{name}", self._core.create_namespaced_config_map, namespace, body)

    def get_configmap(self, namespace: str, name: str) -> KubeObject:
        return self._call(f"get configmap {namespace}/{name}", self._core.read_namespaced_config_map, name, namespace)

    def replace_configmap(self, namespace: str, name: str, body: KubeObject) -> KubeObject:
        return self._call(f"replace configmap {namespace}/{name}", self._core.replace_namespaced_config_map, name, namespace, body)

    def create_event(self, namespace: str, body: KubeObject) -> KubeObject:
        return self._call(f"create event in {namespace}", self._core.create_namespaced_event, namespace, body)

    # --- leases ---------------------------------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> KubeObject:
        return self._call(f"get lease {namespace}/{name}", self._coordination.read_namespaced_lease, name, namespace)

    def create_lease(self, namespace: str, body: KubeObject) -> KubeObject:
        name = (body.get("metadata") or {}).get("name")
        path = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        return self._send(f"create lease {namespace}/{name}", "POST", path, {"namespace": namespace}, body)

    def replace_lease(self, namespace: str, name: str, body: KubeObject) -> KubeObject:
        path = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        return self._send(f"replace lease {namespace}/{name}", "PUT", path, {"namespace": namespace, "name": name}, body)

    # --- resource.k8s.io/v1 (sent as JSON by path: no dependence on the package's generated models) ---
    def get_resource_claim(self, namespace: str, name: str) -> KubeObject:
        path = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
        return self._send(f"get resourceclaim {namespace}/{name}", "GET", path, {"namespace": namespace, "name": name}, None)

    def list_resource_claims(self) -> list[KubeObject]:
        return self.list_resource_claims_and_version()[0]

    def list_resource_claims_and_version(self) -> tuple[list[KubeObject], str]:
        data = self._send("list resourceclaims", "GET", _CLAIMS, {}, None)
        return _items_and_version(data)

    def list_resource_slices(self, *, node_name: str | None = None, driver: str | None = None) -> list[KubeObject]:
        data = self._send("list resourceslices", "GET", _SLICES, {}, None, query=_slice_selector(node_name, driver))
        return list(data.get("items") or [])

    def list_resource_slices_and_version(self, *, driver: str | None = None) -> tuple[list[KubeObject], str]:
        data = self._send("list resourceslices", "GET", _SLICES, {}, None, query=_slice_selector(None, driver))
        return _items_and_version(data)

    def create_resource_slice(self, body: KubeObject) -> KubeObject:
        meta = body.get("metadata") or {}
        return self._send(f"create resourceslice {meta.get('name') or meta.get('generateName')}", "POST", "/apis/resource.k8s.io/v1/resourceslices", {}, body)

    def replace_resource_slice(self, name: str, body: KubeObject) -> KubeObject:
        return self._send(f"replace resourceslice {name}", "PUT", "/apis/resource.k8s.io/v1/resourceslices/{name}", {"name": name}, body)

    def delete_resource_slice(self, name: str) -> None:
        self._send(f"delete resourceslice {name}", "DELETE", "/apis/resource.k8s.io/v1/resourceslices/{name}", {"name": name}, None)

    # --- watches --------------------------------------------------------------------------------
    def watch_pods(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        return self._watch("watch pods", self._core.list_pod_for_all_namespaces, resource_version, stop_after_s)

    def watch_nodes(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        return self._watch("watch nodes", self._core.list_node, resource_version, stop_after_s)

    def watch_resource_claims(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        return self._watch_path("watch resourceclaims", _CLAIMS, [], resource_version, stop_after_s)

    def watch_resource_slices(
        self, *, driver: str | None = None, resource_version: str | None = None, stop_after_s: float | None = None
    ) -> Iterator[WatchEvent]:
        return self._watch_path("watch resourceslices", _SLICES, _slice_selector(None, driver), resource_version, stop_after_s)

    def _watch_path(
        self, what: str, path: str, query: list[tuple[str, str]], resource_version: str | None, stop_after_s: float | None
    ) -> Iterator[WatchEvent]:
        """A watch of a path the package has no generated models for, read as `_watch` reads its own."""
        query = [*query, ("watch", "true")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        seconds, timeout = self._watch_limits(stop_after_s)
        if seconds is not None:
            query.append(("timeoutSeconds", str(seconds)))
        return self._events(what, self._request(what, "GET", path, {}, None, query, timeout))

    def _watch_limits(self, stop_after_s: float | None) -> tuple[int | None, Any]:
        """The watch's `timeoutSeconds` (None: the server's default) and the request timeout: the
        server ends the stream after those seconds, so silence beyond them is a dead connection."""
        if stop_after_s is None:
            return None, self._settings.request_timeout_s
        seconds = max(1, int(stop_after_s))
        return seconds, (self._settings.request_timeout_s, seconds + self._settings.request_timeout_s)

    def _watch(self, what: str, list_fn: Callable[..., Any], resource_version: str | None, stop_after_s: float | None) -> Iterator[WatchEvent]:
        """The events of one watch request, read as JSON lines off the raw stream: the package's
        `watch.Watch` would re-watch by itself when the server ends the stream, deserialize every
        object into a model and let urllib3's errors through."""
        kwargs: dict[str, Any] = {"watch": True}
        if resource_version:
            kwargs["resource_version"] = resource_version
        seconds, timeout = self._watch_limits(stop_after_s)
        if seconds is not None:
            kwargs["timeout_seconds"] = seconds
            kwargs["_request_timeout"] = timeout
        response = self._open(what, list_fn, **kwargs)
        return self._events(what, response)

    @staticmethod
    def _events(what: str, response: Any) -> Iterator[WatchEvent]:
        ended = False
        try:
            pending = b""
            for chunk in response.stream(None):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    event = _watch_event(what, line)
                    if event is not None:
                        yield event
            if pending.strip():
                event = _watch_event(what, pending)
                if event is not None:
                    yield event
            ended = True
        except _TRANSPORT as exc:
            raise TransportError(f"{what}: the stream broke off: {_cause(exc)}") from exc
        finally:
            if not ended:  # a half-read stream must not go back to the pool
                response.close()
            response.release_conn()


_CLAIMS: Final = "/apis/resource.k8s.io/v1/resourceclaims"
_SLICES: Final = "/apis/resource.k8s.io/v1/resourceslices"


def _slice_selector(node_name: str | None, driver: str | None) -> list[tuple[str, str]]:
    selectors = [f"spec.nodeName={node_name}"] if node_name is not None else []
    selectors += [f"spec.driver={driver}"] if driver is not None else []
    return [("fieldSelector", ",".join(selectors))] if selectors else []


def _items_and_version(data: KubeObject) -> tuple[list[KubeObject], str]:
    return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion") or "")


def _watch_event(what: str, line: bytes) -> WatchEvent | None:
    """The event on one line; None for blank lines and BOOKMARKs; raises for an ERROR event."""
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise TransportError(f"{what}: the stream is not JSON lines: {line[:80]!r}") from exc
    kind = event.get("type") if isinstance(event, dict) else None
    obj = event.get("object") if isinstance(event, dict) else None
    if not isinstance(obj, dict):
        raise TransportError(f"{what}: a watch event without an object: {line[:80]!r}")
    if kind == "ERROR":  # a Status: 410 Expired when the resourceVersion is too old
        code = obj.get("code")
        raise _typed(code if isinstance(code, int) and code else 500, str(obj.get("message") or obj.get("reason") or "the watch ended with an error"))
    if kind == "ADDED":
        return WatchEvent("ADDED", obj)
    if kind == "MODIFIED":
        return WatchEvent("MODIFIED", obj)
    if kind == "DELETED":
        return WatchEvent("DELETED", obj)
    return None  # BOOKMARK


def _in_cluster(configuration: Any) -> bool:
    """Load the pod's service account into `configuration`; False outside a pod."""
    from kubernetes import config

    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        return False
    return True
