"""Each object has one owner: no identity appears twice across a stack's components, and every
namespace a component or Helm release uses is created exactly once (or is the cluster's own)."""
from __future__ import annotations

from collections import Counter

import pytest
from manifests_helpers import STACK_NAMES, BuiltStack, build

from tessera.model import StackConfig
from tessera.manifests.objects import KubeObject
from tessera.manifests.stack import build_stack, helm_releases

SYSTEM_NAMESPACES = {"kube-system", "kube-public", "kube-node-lease", "default"}


def _identity(o: KubeObject) -> tuple[str, str, str, str]:
    return (o["apiVersion"], o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])


def _variants(built: BuiltStack) -> list[tuple[str, StackConfig]]:
    config = built.config
    shared_ns = config.model_copy(update={"gpu_operator": config.gpu_operator.model_copy(update={"namespace": config.namespace})})
    return [(built.name, config), (f"{built.name} with gpu-operator in {config.namespace}", shared_ns)]


@pytest.mark.parametrize("name", STACK_NAMES)
def test_no_identity_twice_across_components(name: str) -> None:
    for label, config in _variants(build(name)):
        components = build_stack(config)
        counts = Counter(_identity(o) for objects in components.values() for o in objects)
        assert [i for i, n in counts.items() if n > 1] == [], label


@pytest.mark.parametrize("name", STACK_NAMES)
def test_every_namespace_used_is_created_once_and_gpu_operator_is_privileged(name: str) -> None:
    for label, config in _variants(build(name)):
        components = build_stack(config)
        created = Counter(o["metadata"]["name"] for objects in components.values() for o in objects if o["kind"] == "Namespace")
        assert all(n == 1 for n in created.values()), label
        quota_namespaces = {q.namespace for q in config.quotas}  # teams' own namespaces, not ours
        used = {o["metadata"]["namespace"] for objects in components.values() for o in objects if "namespace" in o["metadata"]}
        used |= {r.namespace for r in helm_releases(config).values()}
        assert used - quota_namespaces - SYSTEM_NAMESPACES <= set(created), label
        if "nvidia" in components:
            (gpu_ns,) = [o for objects in components.values() for o in objects if o["kind"] == "Namespace" and o["metadata"]["name"] == config.gpu_operator.namespace]
            # the operator's toolkit, device plugin and mig-manager are privileged host agents
            assert gpu_ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged", label
