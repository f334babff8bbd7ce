"""The two webhook objects the webhook itself writes at runtime, as typed Pulumi resources.

The webhook fills its TLS Secret's `data` and sets the `caBundle` of its own
MutatingWebhookConfiguration (docs/webhook.md). Inside a yaml v2 `ConfigGroup` those objects are
children of a remote component, so no option of ours reaches them; as typed resources they take
`ignore_changes`, and Pulumi never clears what the webhook wrote (after a `pulumi refresh` the state
holds the webhook's values, and an update keeps them).

The typed inputs are built from the same pure builder output (`tessera.manifests.webhook`) that
`tessera render` writes, field by field into the `*Args` classes. A field the converter does not
know raises instead of being dropped, so a builder change cannot silently vanish from Pulumi.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pulumi
from pulumi_kubernetes.admissionregistration.v1 import (
    MatchConditionArgs,
    MutatingWebhookArgs,
    MutatingWebhookConfiguration,
    RuleWithOperationsArgs,
    ServiceReferenceArgs,
    WebhookClientConfigArgs,
)
from pulumi_kubernetes.core.v1 import Secret
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, LabelSelectorRequirementArgs, ObjectMetaArgs

from tessera.manifests import webhook as webhook_manifests
from tessera.manifests.objects import KubeObject

# Pulumi property paths (https://www.pulumi.com/docs/iac/concepts/miscellaneous/property-paths/):
# `[*]` matches every element, names are the Kubernetes (camelCase) input names.
SECRET_IGNORE_CHANGES: Final = ("data",)
CA_BUNDLE_IGNORE_CHANGES: Final = ("webhooks[*].clientConfig.caBundle",)


def is_runtime_written(o: KubeObject) -> bool:
    """The TLS Secret and the MutatingWebhookConfiguration the webhook fills at runtime."""
    name = o["metadata"]["name"]
    return (o["kind"], name) in (("Secret", webhook_manifests.TLS_SECRET), ("MutatingWebhookConfiguration", webhook_manifests.NAME))


def _fields(source: Mapping[str, Any], known: set[str], what: str) -> dict[str, Any]:
    unknown = set(source) - known
    if unknown:
        raise ValueError(f"{what}: no typed field for {sorted(unknown)}; extend components/tessera_pulumi/platform/webhook.py")
    return dict(source)


def object_meta(meta: Mapping[str, Any]) -> ObjectMetaArgs:
    m = _fields(meta, {"name", "namespace", "labels", "annotations"}, "metadata")
    return ObjectMetaArgs(name=m["name"], namespace=m.get("namespace"), labels=m.get("labels"), annotations=m.get("annotations"))


def label_selector(selector: Mapping[str, Any]) -> LabelSelectorArgs:
    s = _fields(selector, {"matchLabels", "matchExpressions"}, "label selector")
    expressions = [
        LabelSelectorRequirementArgs(key=e["key"], operator=e["operator"], values=e.get("values"))
        for e in (_fields(x, {"key", "operator", "values"}, "label selector requirement") for x in s.get("matchExpressions", []))
    ]
    return LabelSelectorArgs(match_labels=s.get("matchLabels"), match_expressions=expressions or None)


def _client_config(config: Mapping[str, Any]) -> WebhookClientConfigArgs:
    c = _fields(config, {"service", "url"}, "clientConfig")  # never caBundle: the webhook sets it
    service = None
    if "service" in c:
        svc = _fields(c["service"], {"name", "namespace", "path", "port"}, "clientConfig.service")
        service = ServiceReferenceArgs(name=svc["name"], namespace=svc["namespace"], path=svc.get("path"), port=svc.get("port"))
    return WebhookClientConfigArgs(service=service, url=c.get("url"))


def _rule(rule: Mapping[str, Any]) -> RuleWithOperationsArgs:
    r = _fields(rule, {"apiGroups", "apiVersions", "operations", "resources", "scope"}, "rule")
    return RuleWithOperationsArgs(
        api_groups=r.get("apiGroups"), api_versions=r.get("apiVersions"), operations=r.get("operations"), resources=r.get("resources"), scope=r.get("scope")
    )


_HOOK_FIELDS: Final = {
    "name", "admissionReviewVersions", "clientConfig", "sideEffects", "failurePolicy", "matchConditions", "matchPolicy",
    "namespaceSelector", "objectSelector", "reinvocationPolicy", "rules", "timeoutSeconds",
}


def mutating_webhook(hook: Mapping[str, Any]) -> MutatingWebhookArgs:
    h = _fields(hook, set(_HOOK_FIELDS), f"webhook {hook.get('name')}")
    conditions = [MatchConditionArgs(name=c["name"], expression=c["expression"]) for c in h.get("matchConditions", [])]
    return MutatingWebhookArgs(
        name=h["name"],
        admission_review_versions=h["admissionReviewVersions"],
        client_config=_client_config(h["clientConfig"]),
        side_effects=h["sideEffects"],
        failure_policy=h.get("failurePolicy"),
        match_conditions=conditions or None,
        match_policy=h.get("matchPolicy"),
        namespace_selector=label_selector(h["namespaceSelector"]) if "namespaceSelector" in h else None,
        object_selector=label_selector(h["objectSelector"]) if "objectSelector" in h else None,
        reinvocation_policy=h.get("reinvocationPolicy"),
        rules=[_rule(r) for r in h.get("rules", [])],
        timeout_seconds=h.get("timeoutSeconds"),
    )


def tls_secret(resource_name: str, o: KubeObject, opts: pulumi.ResourceOptions) -> Secret:
    """The (empty) TLS Secret; `data` is the webhook's from the first start on."""
    body = _fields(o, {"apiVersion", "kind", "metadata", "type"}, "TLS Secret")  # no data: rendered empty
    ignore = pulumi.ResourceOptions(ignore_changes=list(SECRET_IGNORE_CHANGES))
    return Secret(resource_name, metadata=object_meta(body["metadata"]), type=body.get("type"), opts=pulumi.ResourceOptions.merge(opts, ignore))


def webhook_configuration(resource_name: str, o: KubeObject, opts: pulumi.ResourceOptions) -> MutatingWebhookConfiguration:
    """The MutatingWebhookConfiguration; each entry's `caBundle` is the webhook's."""
    body = _fields(o, {"apiVersion", "kind", "metadata", "webhooks"}, "MutatingWebhookConfiguration")
    ignore = pulumi.ResourceOptions(ignore_changes=list(CA_BUNDLE_IGNORE_CHANGES))
    return MutatingWebhookConfiguration(
        resource_name,
        metadata=object_meta(body["metadata"]),
        webhooks=[mutating_webhook(h) for h in body["webhooks"]],
        opts=pulumi.ResourceOptions.merge(opts, ignore),
    )
