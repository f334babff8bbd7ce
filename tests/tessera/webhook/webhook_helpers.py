"""Test support (imported by conftest and tests): a real HTTPS webhook on 127.0.0.1, an in-memory TLS API, a JSONPatch applier."""
from __future__ import annotations

import base64
import copy
import datetime as dt
import http.client
import json
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tessera.kube.api import Conflict, NotFound
from tessera.webhook.server import ServerSettings, WebhookHttpServer, serve
from tessera.webhook.settings import WebhookSettings
from tessera.webhook.tls import CertBundle, SecretState, generate_bundle

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.timezone.utc)
SETTINGS = WebhookSettings(
    shared_pools=frozenset({"shared-a", "shared-b"}),
    qgpu_alias_pools=frozenset({"shared-a"}),
)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_json_patch(document: Mapping[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """A small RFC 6902 applier (add/replace/remove/test) for checking the webhook's output."""
    doc: dict[str, Any] = copy.deepcopy(dict(document))
    for op in patch:
        *parents, last = [_unescape(t) for t in op["path"].split("/")[1:]]
        target: Any = doc
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if op["op"] == "test":
            current = target[int(last)] if isinstance(target, list) else target[last]
            assert current == op["value"], f"test failed at {op['path']}"
        elif op["op"] in ("add", "replace"):
            if isinstance(target, list):
                index = len(target) if last == "-" else int(last)
                if op["op"] == "add":
                    target.insert(index, op["value"])
                else:
                    target[index] = op["value"]
            else:
                if op["op"] == "replace":
                    assert last in target, f"replace of missing {op['path']}"
                target[last] = op["value"]
        elif op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        else:
            raise AssertionError(f"unsupported op {op['op']}")
    return doc


def review_body(pod: Mapping[str, Any], *, uid: str = "0f3c1a52-8d7e-4b7a-9a51-2b2f0c6d9e11", operation: str = "CREATE", kind: str = "Pod") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "team-a",
            "operation": operation,
            "object": pod,
        },
    }


def pod(*containers: dict[str, Any], node_selector: Mapping[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if node_selector is not None:
        body["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "job-", "namespace": "team-a"}, "spec": body}


def container(name: str, limits: Mapping[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "cuda:12"}
    if limits is not None:
        out["resources"] = {"limits": dict(limits)}
    out.update(extra)
    return out


@dataclass
class WebhookClient:
    port: int
    context: ssl.SSLContext

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection("localhost", self.port, context=self.context, timeout=10)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def review(self, body: Mapping[str, Any], path: str = "/mutate") -> dict[str, Any]:
        status, raw = self.request("POST", path, json.dumps(body).encode())
        assert status == 200, raw
        answer: dict[str, Any] = json.loads(raw)
        return answer["response"]

    def mutate(self, pod_: Mapping[str, Any], path: str = "/mutate") -> tuple[dict[str, Any], dict[str, Any]]:
        """(patched pod, response) for one pod."""
        response = self.review(review_body(pod_), path)
        patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        return apply_json_patch(pod_, patch), response


@pytest.fixture(scope="module")
def localhost_bundle() -> CertBundle:
    return generate_bundle(("localhost",), dt.datetime.now(dt.timezone.utc))


def start_webhook(
    settings: WebhookSettings, bundle: CertBundle, server: ServerSettings = ServerSettings(host="127.0.0.1", port=0), stop: threading.Event | None = None
) -> tuple[WebhookHttpServer, threading.Thread]:
    started: list[WebhookHttpServer] = []
    ready = threading.Event()

    def on_ready(server: WebhookHttpServer) -> None:
        started.append(server)
        ready.set()

    thread = threading.Thread(target=serve, args=(server, settings, bundle), kwargs={"ready": on_ready, "stop": stop}, daemon=True)
    thread.start()
    assert ready.wait(10), "webhook did not start"
    return started[0], thread


@pytest.fixture(scope="module")
def webhook(localhost_bundle: CertBundle) -> Iterator[WebhookClient]:
    server, thread = start_webhook(SETTINGS, localhost_bundle)
    context = ssl.create_default_context(cadata=localhost_bundle.ca_pem)
    yield WebhookClient(server.server_address[1], context)
    server.shutdown()
    thread.join(10)


@dataclass
class InMemoryTlsApi:
    """`TlsApi` over dicts, counting writes; `race` stores a bundle just before our first write."""

    secrets: dict[tuple[str, str], SecretState] = field(default_factory=dict)
    webhooks: dict[str, list[str]] = field(default_factory=dict)
    writes: int = 0
    race: Callable[[], CertBundle] | None = None
    _version: int = 1

    def read_secret(self, namespace: str, name: str) -> SecretState:
        try:
            return copy.deepcopy(self.secrets[(namespace, name)])
        except KeyError:
            raise NotFound(f"secret {namespace}/{name}") from None

    def write_secret(self, namespace: str, name: str, data: Mapping[str, str], resource_version: str) -> None:
        if self.race is not None:
            winner, self.race = self.race(), None
            self._store(namespace, name, winner.to_secret_data())
        if self.read_secret(namespace, name).resource_version != resource_version:
            raise Conflict("the object has been modified")
        self.writes += 1
        self._store(namespace, name, dict(data))

    def _store(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self._version += 1
        self.secrets[(namespace, name)] = SecretState(data=data, resource_version=str(self._version))

    def ca_bundles(self, webhook_configuration: str) -> list[str]:
        if webhook_configuration not in self.webhooks:
            raise NotFound(f"mutatingwebhookconfigurations {webhook_configuration}")
        return list(self.webhooks[webhook_configuration])

    def set_ca_bundle(self, webhook_configuration: str, ca_pem: str) -> None:
        self.webhooks[webhook_configuration] = [ca_pem for _ in self.ca_bundles(webhook_configuration)]
