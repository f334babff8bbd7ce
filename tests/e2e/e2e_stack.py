"""Stack configs for the end-to-end scenarios, and what the rendered manifests say about them.

Stacks are built the way a user writes them (a Pulumi stack mapping validated by the real config
model); everything the harness wires (node labels, taints, webhook settings, scheduler config,
pools file) is read from the real builders' output, never restated here.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tessera.model.loader import from_pulumi_mapping, stack_mapping
from tessera.model.stack import StackConfig
from tessera.model.labels_taints import pool_labels, pool_taints
from tessera.manifests.stack import build_stack
from tessera.webhook.settings import WebhookSettings

REPO = Path(__file__).resolve().parents[2]
KubeObject = dict[str, Any]


def dev_mapping() -> dict[str, Any]:
    """The dev stack's mapping (cluster, quotas, monitoring), as `tessera validate` reads it."""
    return stack_mapping(yaml.safe_load((REPO / "stacks" / "Pulumi.dev.yaml").read_text()))


def shared_pool(
    name: str = "t4-shared",
    *,
    policy: str = "best-effort",
    placement: str = "binpack",
    online_offline: bool = False,
    instance_type: str = "GN7.2XLARGE32",
    **sharing: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "shared",
        "instanceType": instance_type,
        "minSize": 1,
        "maxSize": 2,
        "sharing": {"policy": policy, "placement": placement, "onlineOffline": online_offline, **sharing},
    }


def nvidia_pool(name: str = "t4-exclusive", instance_type: str = "GN7.2XLARGE32") -> dict[str, Any]:
    return {"name": name, "kind": "nvidia", "instanceType": instance_type, "minSize": 1, "maxSize": 1}


def stack(*pools: Mapping[str, Any], **keys: Any) -> StackConfig:
    mapping = dev_mapping()
    mapping["nodePools"] = [dict(p) for p in pools]
    mapping.update(keys)
    return from_pulumi_mapping(mapping)


def pool_named(config: StackConfig, name: str) -> Any:
    return next(p for p in config.node_pools if p.name == name)


def node_labels(config: StackConfig, pool: str) -> dict[str, str]:
    """What the TKE node pool puts on its nodes (tessera/model/labels_taints.py)."""
    return pool_labels(pool_named(config, pool))


def node_taints(config: StackConfig, pool: str) -> list[dict[str, str]]:
    return [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool_taints(pool_named(config, pool))]


class Rendered:
    """The objects `tessera render` writes for one stack, with lookups the scenarios need."""

    def __init__(self, config: StackConfig) -> None:
        self.components = build_stack(config)

    def objects(self, component: str | None = None) -> list[KubeObject]:
        groups = [self.components.get(component, [])] if component else list(self.components.values())
        return [o for group in groups for o in group]

    def find(self, kind: str, name: str) -> KubeObject:
        for o in self.objects():
            if o["kind"] == kind and o["metadata"]["name"] == name:
                return o
        raise KeyError(f"no {kind} {name} in the rendered stack")

    def configmap_file(self, name: str, key: str) -> str:
        return str(self.find("ConfigMap", name)["data"][key])

    def webhook_settings(self) -> WebhookSettings:
        return WebhookSettings.from_json(json.loads(self.configmap_file("tessera-webhook", "webhook.json")))

    def scheduler_configuration(self) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(self.configmap_file("tessera-scheduler-config", "config.yaml"))
        return doc

    def extender_entry(self) -> dict[str, Any]:
        extenders = self.scheduler_configuration()["extenders"]
        assert len(extenders) == 1, extenders
        entry: dict[str, Any] = extenders[0]
        return entry

    def pod_spec(self, kind: str, name: str) -> dict[str, Any]:
        spec: dict[str, Any] = self.find(kind, name)["spec"]["template"]["spec"]
        return spec


def tolerates(tolerations: list[dict[str, Any]], taints: list[dict[str, str]]) -> bool:
    """kube-scheduler's TaintToleration filter for NoSchedule/NoExecute taints."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates_one(t, taint) for t in tolerations):
            return False
    return True


def _tolerates_one(toleration: Mapping[str, Any], taint: Mapping[str, str]) -> bool:
    if toleration.get("effect") not in (None, "", taint.get("effect")):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return toleration.get("key") in (None, "", taint["key"])
    return bool(toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", ""))


def selects(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """nodeSelector plus required node affinity (In / NotIn / Exists / DoesNotExist)."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_term_matches(t, labels) for t in terms)


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    for e in term.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def runs_on(pod_spec: Mapping[str, Any], labels: Mapping[str, str], taints: list[dict[str, str]]) -> bool:
    """Whether a DaemonSet with this pod template gets a pod on a node with these labels and taints."""
    return selects(pod_spec, labels) and tolerates(list(pod_spec.get("tolerations") or []), taints)
