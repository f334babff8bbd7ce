"""`KubernetesTlsApi` over the real `kubernetes` client against a loopback stand-in API server:
the wire format (paths, patch content types, base64, resourceVersion preconditions)."""
from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from json_api_stand_in import serving
from webhook_helpers import NOW

from tessera.kube.api import Conflict, NotFound
from tessera.webhook.kube_tls import KubernetesTlsApi
from tessera.webhook.server import bootstrap_certificate
from tessera.webhook.settings import TlsSettings, WebhookSettings

NS, SECRET, MWC = "tessera-system", "tessera-webhook-tls", "tessera-webhook"
SECRET_PATH = f"/api/v1/namespaces/{NS}/secrets/{SECRET}"
MWC_PATH = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{MWC}"


class StandIn:
    """Just enough of an API server for one Secret and one MutatingWebhookConfiguration."""

    def __init__(self) -> None:
        self.version = 1
        self.secret: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": NS, "resourceVersion": "1", "labels": {"app": "tessera"}},
            "type": "Opaque",
        }
        self.mwc: dict[str, Any] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": MWC, "resourceVersion": "1"},
            "webhooks": [
                {"name": n, "admissionReviewVersions": ["v1"], "sideEffects": "None", "clientConfig": {"service": {"namespace": NS, "name": MWC}}}
                for n in ("pods.webhook.tessera.dev", "qgpu-pods.webhook.tessera.dev")
            ],
        }
        self.content_types: list[str] = []

    def handle(self, method: str, path: str, content_type: str, body: Any) -> tuple[int, Any]:
        if path == SECRET_PATH and method == "GET":
            return 200, self.secret
        if path == SECRET_PATH and method == "PATCH":
            self.content_types.append(content_type)
            if body["metadata"]["resourceVersion"] != self.secret["metadata"]["resourceVersion"]:
                return 409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409, "message": "conflict"}
            self.version += 1
            self.secret["data"] = body["data"]
            self.secret["metadata"]["resourceVersion"] = str(self.version)
            return 200, self.secret
        if path == MWC_PATH and method == "GET":
            return 200, self.mwc
        if path == MWC_PATH and method == "PATCH":
            self.content_types.append(content_type)
            for op in body:
                _, _, index, *rest = op["path"].split("/")
                hook = self.mwc["webhooks"][int(index)]
                if op["op"] == "test":
                    assert hook["name"] == op["value"]
                else:
                    assert rest == ["clientConfig", "caBundle"]
                    hook["clientConfig"]["caBundle"] = op["value"]
            return 200, self.mwc
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}


@pytest.fixture()
def stand_in() -> Iterator[tuple[StandIn, KubernetesTlsApi]]:
    from kubernetes import client

    state = StandIn()

    with serving(lambda method, path, content_type, body: state.handle(method, path.split("?")[0], content_type, body)) as url:
        configuration = client.Configuration()
        configuration.host = url
        yield state, KubernetesTlsApi(client.ApiClient(configuration))


def test_bootstrap_over_the_wire_fills_secret_and_ca_bundles(stand_in: tuple[StandIn, KubernetesTlsApi]) -> None:
    state, api = stand_in
    tls = TlsSettings(namespace=NS, service_name=MWC, secret_name=SECRET, webhook_configuration_name=MWC)
    bundle = bootstrap_certificate(api, WebhookSettings(tls=tls), NOW).bundle
    assert base64.b64decode(state.secret["data"]["tls.crt"]).decode() == bundle.cert_pem
    assert state.secret["metadata"]["labels"] == {"app": "tessera"}  # a patch, not a replace
    bundles = {base64.b64decode(h["clientConfig"]["caBundle"]).decode() for h in state.mwc["webhooks"]}
    assert bundles == {bundle.ca_pem}
    # a strategic merge patch carrying resourceVersion (a precondition); RFC 6902 for the caBundle
    assert state.content_types == ["application/strategic-merge-patch+json", "application/json-patch+json"]
    # a second replica reads and reuses it
    assert bootstrap_certificate(api, WebhookSettings(tls=tls), NOW + dt.timedelta(days=1)).bundle == bundle


def test_stale_write_and_missing_objects_map_to_kube_errors(stand_in: tuple[StandIn, KubernetesTlsApi]) -> None:
    _, api = stand_in
    with pytest.raises(Conflict):
        api.write_secret(NS, SECRET, {"tls.crt": "x"}, resource_version="999")
    with pytest.raises(NotFound):
        api.read_secret(NS, "other")
    with pytest.raises(NotFound):
        api.ca_bundles("other")
