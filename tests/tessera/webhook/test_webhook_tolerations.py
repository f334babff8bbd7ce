"""Pods routed to tessera-scheduler tolerate the shared pools' taint, driven over real HTTPS.

Every shared node is tainted `tessera.dev/gpu=shared:NoSchedule`; a qGPU user's unchanged Job
carries no Tessera toleration, so without the webhook's toleration kube-scheduler would filter
every shared node out and the pod would stay Pending."""
from __future__ import annotations

from typing import Any

import pytest
from webhook_helpers import WebhookClient, container, pod

from tessera.model import contract
from tessera.webhook.admission import SHARED_GPU_TOLERATION, tolerates

SHARED_TAINT = {"key": contract.TAINT_GPU, "value": "shared", "effect": "NoSchedule"}
# spelled out, not read from the module: this is what kube-scheduler must see
OURS = {"key": "tessera.dev/gpu", "operator": "Equal", "value": "shared", "effect": "NoSchedule"}


def _tolerations(patched: dict[str, Any]) -> list[dict[str, Any]]:
    return list(patched["spec"].get("tolerations") or [])


@pytest.mark.parametrize(
    "limits",
    [{contract.GPU_CORE: "30", contract.GPU_MEMORY: "3072"}, {contract.GPU_CORE: "200"}],
    ids=["fractional", "whole-gpus"],
)
def test_gpu_pod_without_tolerations_gets_the_shared_pool_toleration(webhook: WebhookClient, limits: dict[str, str]) -> None:
    patched, response = webhook.mutate(pod(container("main", limits)))
    assert response["allowed"] is True
    assert _tolerations(patched) == [OURS]
    assert tolerates(OURS, SHARED_TAINT) and dict(SHARED_GPU_TOLERATION) == OURS


def test_qgpu_pod_on_an_opted_in_pool_gets_it_too(webhook: WebhookClient) -> None:
    patched, _ = webhook.mutate(pod(container("main", {contract.QGPU_CORE: "30", contract.QGPU_MEMORY: "3"}), node_selector={contract.LABEL_POOL: "shared-a"}))
    assert _tolerations(patched) == [OURS]


@pytest.mark.parametrize(
    "existing",
    [
        {"key": contract.TAINT_GPU, "operator": "Equal", "value": "shared", "effect": "NoSchedule"},
        {"key": contract.TAINT_GPU, "value": "shared", "effect": "NoSchedule"},  # operator defaults to Equal
        {"key": contract.TAINT_GPU, "operator": "Exists", "effect": "NoSchedule"},
        {"key": contract.TAINT_GPU, "operator": "Exists"},  # every effect
        {"key": contract.TAINT_GPU, "operator": "Equal", "value": "shared"},
        {"operator": "Exists"},  # tolerates every taint
    ],
    ids=["same", "default-operator", "exists-key", "exists-key-any-effect", "equal-any-effect", "exists-everything"],
)
def test_an_equivalent_toleration_is_not_duplicated(webhook: WebhookClient, existing: dict[str, str]) -> None:
    other = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    patched, _ = webhook.mutate(pod(container("main", {contract.GPU_CORE: "50"}), tolerations=[other, existing]))
    assert _tolerations(patched) == [other, existing]


@pytest.mark.parametrize(
    "existing",
    [
        {"key": contract.TAINT_GPU, "operator": "Equal", "value": "mig", "effect": "NoSchedule"},  # another pool kind
        {"key": contract.TAINT_GPU, "operator": "Exists", "effect": "NoExecute"},  # another effect
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},  # another key
    ],
    ids=["other-kind", "other-effect", "other-key"],
)
def test_a_toleration_of_another_taint_is_kept_and_ours_added_once(webhook: WebhookClient, existing: dict[str, str]) -> None:
    patched, _ = webhook.mutate(pod(container("main", {contract.GPU_CORE: "50"}), tolerations=[existing]))
    assert _tolerations(patched) == [existing, OURS]


def test_reinvocation_keeps_exactly_one(webhook: WebhookClient) -> None:
    first, _ = webhook.mutate(pod(container("main", {contract.GPU_CORE: "50"}), tolerations=[]))
    second, _ = webhook.mutate(first)
    assert _tolerations(first) == _tolerations(second) == [OURS]


@pytest.mark.parametrize(
    "spec_pod",
    [
        pod(container("web", {"cpu": "1"})),
        pod(container("cuda", {contract.NVIDIA_GPU: "1"})),  # whole GPUs from the NVIDIA plugin: not Tessera's pools
        pod(container("q", {contract.QGPU_CORE: "40"}), node_selector={contract.LABEL_POOL: "shared-b"}),  # not opted in: left to qGPU
    ],
    ids=["cpu-only", "nvidia-gpu", "qgpu-not-opted-in"],
)
def test_pods_not_routed_to_tessera_get_no_toleration(webhook: WebhookClient, spec_pod: dict[str, Any]) -> None:
    patched, _ = webhook.mutate(spec_pod)
    assert "tolerations" not in patched["spec"]
