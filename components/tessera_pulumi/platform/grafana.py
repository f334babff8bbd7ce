"""Grafana's admin credentials for kube-prometheus-stack, from a Pulumi secret.

The chart's own default password is public, so the stack names a Pulumi secret config key
(`monitoring.kubePrometheusStack.grafana.adminPasswordSecret`) and this module turns its value
into the Secret the chart's values point at (`grafana.admin.existingSecret`). The password stays
a Pulumi secret end to end: encrypted in state, never in the rendered values. A key that is not
set stops the program with the command that sets it, before anything is declared in the cluster.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
from pulumi_kubernetes.core.v1 import Secret, SecretInitArgs
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs

from tessera.model.stack import StackConfig
from tessera.manifests.kube_prometheus_stack import GRAFANA_ADMIN_SECRET, GRAFANA_PASSWORD_KEY, GRAFANA_USER_KEY, grafana_admin_secret_key
from tessera.manifests.objects import metadata

COMPONENT = "monitoring"


def admin_password(config: StackConfig, secrets: Mapping[str, Any]) -> pulumi.Input[str] | None:
    """The password from the engine's config, None when the stack deploys no Grafana; RunError when
    unset. The package's components hand secrets over as outputs (tessera_pulumi.package.inputs):
    those pass through untouched, so the value stays secret and is never turned into text here."""
    key = grafana_admin_secret_key(config)
    if key is None:
        return None
    value = secrets.get(f"tessera:{key}")
    if isinstance(value, pulumi.Output):
        return value
    if value is None or not str(value):
        raise pulumi.RunError(
            f"monitoring.kubePrometheusStack.grafana.adminPasswordSecret: tessera:{key} is not set; run "
            f"pulumi config set --secret tessera:{key} <password>"
        )
    return str(value)


def admin_secret(name: str, config: StackConfig, secrets: Mapping[str, Any], opts: pulumi.ResourceOptions) -> Secret | None:
    """The typed Secret in the monitoring namespace, or None when Grafana is not deployed."""
    password = admin_password(config, secrets)
    if password is None:
        return None
    grafana = config.monitoring.kube_prometheus_stack.grafana
    meta = metadata(GRAFANA_ADMIN_SECRET, COMPONENT, config.monitoring.kube_prometheus_stack.namespace)
    return Secret(
        name,
        SecretInitArgs(
            metadata=ObjectMetaArgs(name=meta["name"], namespace=meta["namespace"], labels=meta["labels"]),
            type="Opaque",
            string_data={GRAFANA_USER_KEY: grafana.admin_user, GRAFANA_PASSWORD_KEY: pulumi.Output.secret(password)},
        ),
        opts=opts,
    )
