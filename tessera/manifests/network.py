"""NetworkPolicies: each Tessera pod accepts connections only on the ports it serves, from who needs them.

Ingress only. Egress stays open because every component talks to the API server, whose address
a portable policy cannot name (managed control planes sit outside the pod network). kubelet's
probes come from the node itself, which the common CNIs (Calico, Cilium, TKE's VPC-CNI) always
allow.

| pod | port | from |
| --- | --- | --- |
| extender | 8888 (filter/prioritize/bind, /metrics) | tessera-scheduler pods; the other extender replicas (a standby forwards to the leader); Prometheus (every replica) |
| tessera-scheduler | 10259 (/metrics, HTTPS + token review) | Prometheus |
| tessera-node | agent and device plugin metrics ports | Prometheus |
| tessera-dra | the agent's metrics port | Prometheus |
| tessera-webhook | 8443 (admission, HTTPS) | anywhere: the API server's address is not portable; the policy still closes every other port |

"Prometheus" is any pod labelled `app.kubernetes.io/name: prometheus` in any namespace (the label
prometheus-operator and kube-prometheus-stack put on Prometheus pods). Clusters that scrape from
elsewhere label their scraper the same way or set `monitoring.enabled: false`.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Final

from tessera.model.contract import EXTENDER_PORT
from tessera.manifests import dra, extender, node, scheduler, webhook
from tessera.manifests.objects import KubeObject, metadata, obj, selector_labels
from tessera.manifests.settings import PlatformSettings
from tessera.webhook.settings import DEFAULT_PORT as WEBHOOK_PORT

PROMETHEUS_POD_LABELS: Final = MappingProxyType({"app.kubernetes.io/name": "prometheus"})


def _prometheus_peer() -> dict[str, Any]:
    return {"namespaceSelector": {}, "podSelector": {"matchLabels": dict(PROMETHEUS_POD_LABELS)}}


def _policy(name: str, component: str, settings: PlatformSettings, rules: list[dict[str, Any]]) -> KubeObject:
    return obj(
        "networking.k8s.io/v1",
        "NetworkPolicy",
        metadata(name, component, settings.namespace),
        spec={
            "podSelector": {"matchLabels": selector_labels(component, name)},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    )


def _rule(port: int, peers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"from": peers, "ports": [{"port": port, "protocol": "TCP"}]}


def build_network_policies(settings: PlatformSettings) -> dict[str, list[KubeObject]]:
    """Component -> its ingress policy (one per Tessera workload of the sharing stack)."""
    if not settings.sharing_enabled:
        return {}
    scrape = [_prometheus_peer()] if settings.monitoring.enabled else []
    scheduler_pods = {"podSelector": {"matchLabels": selector_labels(scheduler.COMPONENT, scheduler.NAME)}}
    extender_pods = {"podSelector": {"matchLabels": selector_labels(extender.COMPONENT, extender.NAME)}}
    extender_rules = [_rule(EXTENDER_PORT, [scheduler_pods, extender_pods, *scrape])]
    scheduler_rules = [_rule(scheduler.SECURE_PORT, scrape)] if scrape else []
    node_rules = [_rule(port, scrape) for port in (settings.monitoring.metrics_port, settings.monitoring.device_plugin_metrics_port)] if scrape else []
    node_policies = []
    if len(settings.dra_pools) < len(settings.shared_pools):
        node_policies.append(_policy(node.NAME, node.COMPONENT, settings, node_rules))
    if settings.dra_pools:  # the agent beside the DRA plugin serves only its own metrics port
        agent_rules = [_rule(settings.monitoring.metrics_port, scrape)] if scrape else []
        node_policies.append(_policy(dra.NAME, dra.COMPONENT, settings, agent_rules))
    return {
        extender.COMPONENT: [_policy(extender.NAME, extender.COMPONENT, settings, extender_rules)],
        scheduler.COMPONENT: [_policy(scheduler.NAME, scheduler.COMPONENT, settings, scheduler_rules)],
        node.COMPONENT: node_policies,
    }


def webhook_network_policy(settings: PlatformSettings) -> KubeObject:
    """Admission calls come from the API server, on the webhook port only."""
    rule = {"ports": [{"port": WEBHOOK_PORT, "protocol": "TCP"}]}
    return _policy(webhook.NAME, webhook.COMPONENT, settings, [rule])
