"""`TlsApi` over the official `kubernetes` client (the only I/O of the certificate bootstrap)."""
from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from tessera.kube.api import Conflict, KubeApiError, NotFound
from tessera.webhook.tls import SecretState


def _translate(exc: Any) -> KubeApiError:
    status = int(getattr(exc, "status", 0) or 0)
    message = str(getattr(exc, "reason", "") or exc)
    if status == 409:
        return Conflict(message)
    if status == 404:
        return NotFound(message)
    return KubeApiError(status, message)


class KubernetesTlsApi:
    """Reads/writes the webhook's TLS Secret and MutatingWebhookConfiguration."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._admission = client.AdmissionregistrationV1Api(api_client)

    @staticmethod
    def in_cluster() -> KubernetesTlsApi:
        from kubernetes import client, config

        config.load_incluster_config()
        return KubernetesTlsApi(client.ApiClient())

    def read_secret(self, namespace: str, name: str) -> SecretState:
        from kubernetes.client.exceptions import ApiException

        try:
            secret = self._core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            raise _translate(exc) from exc
        data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        version = secret.metadata.resource_version if secret.metadata is not None else None
        return SecretState(data=data, resource_version=str(version or ""))

    def write_secret(self, namespace: str, name: str, data: Mapping[str, str], resource_version: str) -> None:
        """A patch, not a PUT: labels and annotations written by Pulumi/kubectl stay; the
        resourceVersion in the patch is a precondition (409 when another replica wrote first)."""
        from kubernetes.client.exceptions import ApiException

        body: Any = {
            "metadata": {"resourceVersion": resource_version},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())},
        }
        try:
            self._core.patch_namespaced_secret(name, namespace, body)
        except ApiException as exc:
            raise _translate(exc) from exc

    def ca_bundles(self, webhook_configuration: str) -> list[str]:
        from kubernetes.client.exceptions import ApiException

        try:
            config = self._admission.read_mutating_webhook_configuration(webhook_configuration)
        except ApiException as exc:
            raise _translate(exc) from exc
        out = []
        for hook in config.webhooks or []:
            raw = hook.client_config.ca_bundle or ""
            out.append(base64.b64decode(raw).decode() if raw else "")
        return out

    def set_ca_bundle(self, webhook_configuration: str, ca_pem: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            config = self._admission.read_mutating_webhook_configuration(webhook_configuration)
            encoded = base64.b64encode(ca_pem.encode()).decode()
            patch: list[dict[str, Any]] = []
            for index, hook in enumerate(config.webhooks or []):
                # `test` guards against the list changing between our read and the patch.
                patch.append({"op": "test", "path": f"/webhooks/{index}/name", "value": hook.name})
                patch.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": encoded})
            if patch:
                self._admission.patch_mutating_webhook_configuration(webhook_configuration, patch)
        except ApiException as exc:
            raise _translate(exc) from exc
