"""What the admission webhook needs to know about the stack, read from one file.

`tessera.manifests.webhook` renders this file into a ConfigMap from the stack config, so the
webhook never parses the stack file itself and a stack edit (a pool opting in to qGPU names)
reaches the webhook as a ConfigMap change plus a rollout.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tessera.model import contract

DEFAULT_PORT = 8443
WEBHOOK_PATH = "/mutate"
# Requests on this path come from the webhook entry whose namespaceSelector matches namespaces
# labelled `tessera.dev/qgpu-aliases=true`: the API server tells us about the opt-in through the
# path, so the webhook never needs to read Namespace objects (no extra RBAC, no extra latency).
WEBHOOK_QGPU_NAMESPACE_PATH = "/mutate/qgpu"


class SettingsError(ValueError):
    """The settings file is missing or malformed; the message says which key to fix."""


@dataclass(frozen=True)
class TlsSettings:
    """Where the serving certificate lives and which webhook configuration trusts it."""

    namespace: str
    """Namespace of the webhook Deployment, Service and TLS Secret."""
    service_name: str
    """Service in front of the webhook; the certificate names `<svc>.<ns>.svc`."""
    secret_name: str
    """Secret holding `ca.crt`, `tls.crt`, `tls.key` (created empty by the manifests)."""
    webhook_configuration_name: str
    """MutatingWebhookConfiguration whose `caBundle` the webhook keeps in sync."""
    renew_before_days: int = 30
    """Default 30: a certificate closer than this to expiry is replaced at start and by the renew loop."""

    def dns_names(self) -> tuple[str, ...]:
        svc, ns = self.service_name, self.namespace
        return (svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local")


@dataclass(frozen=True)
class WebhookSettings:
    """Stack facts the mutation depends on."""

    scheduler_name: str = contract.SCHEDULER_NAME
    """Default `tessera-scheduler`: the second scheduler the Tessera stack runs."""
    shared_pools: frozenset[str] = field(default_factory=frozenset)
    """Names of every `shared` pool in the stack (default: none)."""
    qgpu_alias_pools: frozenset[str] = field(default_factory=frozenset)
    """Shared pools that accept `tke.cloud.tencent.com/qgpu-*` names (default: none, opt-in)."""
    dra_pools: frozenset[str] = field(default_factory=frozenset)
    """Shared pools with `allocation: dra` (default: none): their GPUs are claimed through DRA, so a
    `tessera.dev/gpu-core` pod pinned to them could never be placed."""
    tls: TlsSettings | None = None
    """None when serving with a certificate from files (tests, cert-manager users)."""
    quotas: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Namespace -> hard limit per Tessera resource (`tessera.dev/gpu-core`, `tessera.dev/gpu-memory`),
    the stack's `quotas` (default: none). A pod whose own request exceeds it is refused."""

    def aliases_for_unpinned_pods(self) -> bool:
        """A pod that names no pool may land on any shared pool, so its qGPU names can only be
        mapped safely when every shared pool opted in."""
        return bool(self.shared_pools) and self.shared_pools <= self.qgpu_alias_pools

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schedulerName": self.scheduler_name,
            "sharedPools": sorted(self.shared_pools),
            "qgpuAliasPools": sorted(self.qgpu_alias_pools),
        }
        if self.dra_pools:
            out["draPools"] = sorted(self.dra_pools)
        if self.quotas:
            out["quotas"] = {ns: dict(sorted(hard.items())) for ns, hard in sorted(self.quotas.items())}
        if self.tls is not None:
            out["tls"] = {
                "namespace": self.tls.namespace,
                "serviceName": self.tls.service_name,
                "secretName": self.tls.secret_name,
                "webhookConfigurationName": self.tls.webhook_configuration_name,
                "renewBeforeDays": self.tls.renew_before_days,
            }
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> WebhookSettings:
        try:
            tls_data = data.get("tls")
            tls = None
            if tls_data is not None:
                tls = TlsSettings(
                    namespace=str(tls_data["namespace"]),
                    service_name=str(tls_data["serviceName"]),
                    secret_name=str(tls_data["secretName"]),
                    webhook_configuration_name=str(tls_data["webhookConfigurationName"]),
                    renew_before_days=int(tls_data.get("renewBeforeDays", 30)),
                )
            settings = WebhookSettings(
                scheduler_name=str(data.get("schedulerName", contract.SCHEDULER_NAME)),
                shared_pools=frozenset(str(p) for p in data.get("sharedPools", [])),
                qgpu_alias_pools=frozenset(str(p) for p in data.get("qgpuAliasPools", [])),
                dra_pools=frozenset(str(p) for p in data.get("draPools", [])),
                tls=tls,
                quotas=_quotas(data.get("quotas", {})),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SettingsError(f"webhook settings: missing or malformed key {exc}") from exc
        not_shared = settings.dra_pools - settings.shared_pools
        if not_shared:
            raise SettingsError(f"webhook settings: draPools {sorted(not_shared)} are not shared pools; only shared pools use DRA")
        unknown = settings.qgpu_alias_pools - settings.shared_pools
        if unknown:
            raise SettingsError(
                f"webhook settings: qgpuAliasPools {sorted(unknown)} are not shared pools; "
                "only shared pools can accept qGPU names"
            )
        return settings


def _quotas(data: Any) -> dict[str, dict[str, int]]:
    if not isinstance(data, dict) or not all(isinstance(hard, dict) for hard in data.values()):
        raise ValueError("quotas must map namespaces to {resource: limit}")
    out: dict[str, dict[str, int]] = {}
    for namespace, hard in data.items():
        for resource, limit in hard.items():
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                raise ValueError(f"quotas.{namespace}.{resource} must be a whole number >= 0, got {limit!r}")
        out[str(namespace)] = {str(k): int(v) for k, v in hard.items()}
    return out


def load_settings(path: Path) -> WebhookSettings:
    """Read the settings file (JSON or YAML; the ConfigMap renders JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read webhook settings {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SettingsError(f"webhook settings {path} is not valid JSON/YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"webhook settings {path} must be a mapping")
    return WebhookSettings.from_json(data)
