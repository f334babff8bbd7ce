"""`KubeApi` over the official `kubernetes` Python client.

Thin adapter: every call asks the client for the raw response (`_preload_content=False`) and
returns the API server's JSON as a dict, so objects keep their camelCase keys and no generated
model class leaks into the core. `ApiException` becomes `Conflict`, `NotFound` or `KubeApiError`.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml

from tessera.kube.api import Conflict, KubeApiError, KubeObject, NotFound, WatchEvent

_MERGE_PATCH = "application/merge-patch+json"
_T = TypeVar("_T")


@dataclass(frozen=True)
class ClientSettings:
    """Where the API server is.

    kubeconfig: path to a kubeconfig file; default None = in-cluster service account when running
        in a pod, else the default kubeconfig (~/.kube/config), like kubectl.
    context: kubeconfig context; default None = the file's current context.
    request_timeout_s: per request; default 10 s, so a stuck API server fails a bind instead of
        hanging kube-scheduler's bind goroutine forever.
    """

    kubeconfig: str | None = None
    context: str | None = None
    request_timeout_s: float = 10.0
    kubeconfig_text: str | None = None
    """The kubeconfig itself (a Pulumi secret), instead of a file; never written to disk."""


def _translate(exc: Exception) -> KubeApiError:
    status = int(getattr(exc, "status", 0) or 0)
    body = getattr(exc, "body", None)
    message = str(getattr(exc, "reason", "") or exc)
    if body:
        try:
            message = str(json.loads(body).get("message", message))
        except (ValueError, AttributeError):
            message = body.decode() if isinstance(body, bytes) else str(body)
    if status == 409:
        return Conflict(message)
    if status == 404:
        return NotFound(message)
    return KubeApiError(status, message)


def _json(resp: Any) -> KubeObject:
    data = resp.data
    parsed: KubeObject = json.loads(data) if data else {}
    return parsed


class KubernetesClientApi:
    """The real `KubeApi`; construct with `connect(settings)`."""

    def __init__(self, api_client: Any, settings: ClientSettings) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._settings = settings

    @staticmethod
    def connect(settings: ClientSettings) -> KubernetesClientApi:
        from kubernetes import client, config

        try:
            if settings.kubeconfig_text is not None:
                document = yaml.safe_load(settings.kubeconfig_text)
                if not isinstance(document, dict):
                    raise config.ConfigException("the kubeconfig text is not a YAML mapping")
                return KubernetesClientApi(config.new_client_from_config_dict(document, context=settings.context), settings)
            if settings.kubeconfig is None and settings.context is None:
                try:
                    config.load_incluster_config()
                    return KubernetesClientApi(client.ApiClient(), settings)
                except config.ConfigException:
                    pass
            api_client = config.new_client_from_config(config_file=settings.kubeconfig, context=settings.context)
        except (config.ConfigException, OSError, yaml.YAMLError) as exc:
            raise KubeApiError(0, f"cannot load Kubernetes configuration: {exc}; pass --kubeconfig PATH or run in a pod") from exc
        return KubernetesClientApi(api_client, settings)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> KubeObject:
        from kubernetes.client.exceptions import ApiException

        try:
            return _json(fn(*args, _preload_content=False, _request_timeout=self._settings.request_timeout_s, **kwargs))
        except ApiException as exc:
            raise _translate(exc) from exc

    # --- pods -----------------------------------------------------------------------------------
    def get_pod(self, namespace: str, name: str) -> KubeObject:
        return self._call(self._core.read_namespaced_pod, name, namespace)

    def list_pods(self, *, node_name: str | None = None, label_selector: str | None = None) -> list[KubeObject]:
        return self.list_pods_and_version(node_name=node_name, label_selector=label_selector)[0]

    def list_pods_and_version(
        self, *, node_name: str | None = None, label_selector: str | None = None
    ) -> tuple[list[KubeObject], str]:
        field_selector = f"spec.nodeName={node_name}" if node_name else None
        data = self._call(self._core.list_pod_for_all_namespaces, field_selector=field_selector, label_selector=label_selector)
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, resource_version: str | None = None
    ) -> KubeObject:
        # a JSON merge patch carrying metadata.resourceVersion is rejected with 409 when stale
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return self._call(self._core.patch_namespaced_pod, name, namespace, {"metadata": metadata}, _content_type=_MERGE_PATCH)

    def bind_pod(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        self._call(self._core.create_namespaced_pod_binding, name, namespace, body)

    def evict_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        from kubernetes import client

        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
        body = client.V1Eviction(
            api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name=name, namespace=namespace), delete_options=options
        )
        self._call(self._core.create_namespaced_pod_eviction, name, namespace, body)

    # --- nodes ----------------------------------------------------------------------------------
    def get_node(self, name: str) -> KubeObject:
        return self._call(self._core.read_node, name)

    def list_nodes(self, *, label_selector: str | None = None) -> list[KubeObject]:
        return self.list_nodes_and_version(label_selector=label_selector)[0]

    def list_nodes_and_version(self, *, label_selector: str | None = None) -> tuple[list[KubeObject], str]:
        data = self._call(self._core.list_node, label_selector=label_selector)
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    def patch_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> KubeObject:
        return self._call(self._core.patch_node, name, {"metadata": {"annotations": dict(annotations)}}, _content_type=_MERGE_PATCH)

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> KubeObject:
        return self._call(self._core.patch_node, name, {"metadata": {"labels": dict(labels)}}, _content_type=_MERGE_PATCH)

    def patch_node_status_capacity(self, name: str, capacity: Mapping[str, str]) -> KubeObject:
        body = {"status": {"capacity": dict(capacity), "allocatable": dict(capacity)}}
        return self._call(self._core.patch_node_status, name, body, _content_type=_MERGE_PATCH)

    # --- config maps, events --------------------------------------------------------------------
    def create_configmap(self, namespace: str, body: KubeObject) -> KubeObject:
        return self._call(self._core.create_namespaced_config_map, namespace, body)

    def get_configmap(self, namespace: str, name: str) -> KubeObject:
        return self._call(self._core.read_namespaced_config_map, name, namespace)

    def replace_configmap(self, namespace: str, name: str, body: KubeObject) -> KubeObject:
        return self._call(self._core.replace_namespaced_config_map, name, namespace, body)

    def create_event(self, namespace: str, body: KubeObject) -> KubeObject:
        return self._call(self._core.create_namespaced_event, namespace, body)

    # --- watches --------------------------------------------------------------------------------
    def watch_pods(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        return self._watch(self._core.list_pod_for_all_namespaces, resource_version, stop_after_s)

    def watch_nodes(self, *, resource_version: str | None = None, stop_after_s: float | None = None) -> Iterator[WatchEvent]:
        return self._watch(self._core.list_node, resource_version, stop_after_s)

    def _watch(self, list_fn: Callable[..., Any], resource_version: str | None, stop_after_s: float | None) -> Iterator[WatchEvent]:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        kwargs: dict[str, Any] = {}
        if resource_version:
            kwargs["resource_version"] = resource_version
        if stop_after_s is not None:
            kwargs["timeout_seconds"] = max(1, int(stop_after_s))
        stream = watch.Watch()
        try:
            # ERROR events (410 Gone included) arrive as ApiException; BOOKMARKs are skipped
            for event in stream.stream(list_fn, **kwargs):
                if not isinstance(event, dict):
                    continue
                kind = event.get("type")
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    yield WatchEvent(kind, event["raw_object"])
        except ApiException as exc:
            raise _translate(exc) from exc
        finally:
            stream.stop()
