"""Quota admission through the real webhook over HTTPS: a pod's GPU request counted as kube-scheduler
and ResourceQuota count it (containers summed, init phases, sidecars, overhead), for gpu-core and
gpu-memory alike, against the namespace quota the stack renders into the webhook's settings."""
from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from webhook_helpers import WebhookClient, container, pod, review_body, start_webhook

from tessera.model import contract
from tessera.webhook.settings import WebhookSettings
from tessera.webhook.tls import CertBundle

CORE, MEMORY = contract.GPU_CORE, contract.GPU_MEMORY
QUOTA_SETTINGS = WebhookSettings(
    shared_pools=frozenset({"shared-a"}),
    qgpu_alias_pools=frozenset({"shared-a"}),
    quotas={"team-a": {CORE: 100, MEMORY: 8192}},
)


@pytest.fixture(scope="module")
def quota_webhook(localhost_bundle: CertBundle) -> Iterator[WebhookClient]:
    server, thread = start_webhook(QUOTA_SETTINGS, localhost_bundle)
    yield WebhookClient(server.server_address[1], ssl.create_default_context(cadata=localhost_bundle.ca_pem))
    server.shutdown()
    thread.join(10)


def sidecar(name: str, limits: dict[str, str] | None = None) -> dict[str, Any]:
    return container(name, limits, restartPolicy="Always")


def _in(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    body["request"]["namespace"] = namespace
    body["request"]["object"]["metadata"]["namespace"] = namespace
    return body


# (case, pod, allowed, fragment of the refusal)
CASES: list[tuple[str, dict[str, Any], bool, str]] = [
    ("two containers within the quota", pod(container("a", {CORE: "60"}), container("b", {CORE: "40"})), True, ""),
    (
        "two containers over the quota",
        pod(container("a", {CORE: "60"}), container("b", {CORE: "50"})),
        False,
        "the pod requests tessera.dev/gpu-core=110 (containers 110) but the quota allows 100 in namespace 'team-a' (ResourceQuota tessera-gpu)",
    ),
    (
        "gpu-memory is summed too",
        pod(container("a", {CORE: "30", MEMORY: "6000"}), container("b", {CORE: "30", MEMORY: "4000"})),
        False,
        "tessera.dev/gpu-memory=10000 (containers 10000) but the quota allows 8192",
    ),
    ("an init container without GPUs adds nothing", pod(container("a", {CORE: "100"}), initContainers=[container("prep", {"cpu": "4"})]), True, ""),
    (
        "an init container with GPUs is refused",
        pod(container("a", {CORE: "10"}), initContainers=[container("prep", {CORE: "50"})]),
        False,
        "init container 'prep' asks for Tessera GPU resources; Tessera gives GPU shares to app containers only",
    ),
    (
        "a sidecar with GPUs is refused as a sidecar",
        pod(container("a", {CORE: "10"}), initContainers=[sidecar("proxy", {CORE: "20"})]),
        False,
        "sidecar container 'proxy' (an init container with restartPolicy: Always) asks for Tessera GPU resources",
    ),
    ("a sidecar without GPUs adds nothing", pod(container("a", {CORE: "100"}), initContainers=[sidecar("proxy", {"cpu": "1"})]), True, ""),
    (
        "GPU overhead from a RuntimeClass is refused",
        pod(container("a", {CORE: "40"}), overhead={CORE: "10"}, runtimeClassName="kata"),
        False,
        "the pod's overhead (RuntimeClass 'kata') asks for tessera.dev/gpu-core",
    ),
    (
        "qGPU memory is counted in MiB after mapping",
        pod(container("a", {contract.QGPU_CORE: "50", contract.QGPU_MEMORY: "10"}), node_selector={contract.LABEL_POOL: "shared-a"}),
        False,
        "tessera.dev/gpu-memory=10240 (containers 10240) but the quota allows 8192",
    ),
]


@pytest.mark.parametrize(("pod_", "allowed", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_quota_admission_counts_like_kube_scheduler(quota_webhook: WebhookClient, pod_: dict[str, Any], allowed: bool, fragment: str) -> None:
    response = quota_webhook.review(review_body(pod_))
    assert response["allowed"] is allowed, response
    if not allowed:
        assert response["status"]["code"] == 400
        assert fragment in response["status"]["message"], response["status"]["message"]


def test_a_namespace_without_a_quota_is_not_limited(quota_webhook: WebhookClient) -> None:
    big = pod(container("a", {CORE: "100"}), container("b", {CORE: "100"}))
    assert quota_webhook.review(_in("team-b", review_body(big)))["allowed"] is True
    assert quota_webhook.review(review_body(big))["allowed"] is False  # team-a


def test_the_namespace_comes_from_the_admission_request(quota_webhook: WebhookClient) -> None:
    """kube-apiserver fills request.namespace; the pod's own metadata may lack it (generateName)."""
    body = review_body(pod(container("a", {CORE: "60"}), container("b", {CORE: "60"})))
    del body["request"]["object"]["metadata"]["namespace"]
    assert quota_webhook.review(body)["allowed"] is False


DRA_SETTINGS = WebhookSettings(shared_pools=frozenset({"dp", "dra-a"}), dra_pools=frozenset({"dra-a"}))


@pytest.fixture(scope="module")
def dra_webhook(localhost_bundle: CertBundle) -> Iterator[WebhookClient]:
    server, thread = start_webhook(DRA_SETTINGS, localhost_bundle)
    yield WebhookClient(server.server_address[1], ssl.create_default_context(cadata=localhost_bundle.ca_pem))
    server.shutdown()
    thread.join(10)


def _pinned(*pools: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": contract.LABEL_POOL, "operator": "In", "values": list(pools)}]}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ({"nodeSelector": {contract.LABEL_POOL: "dra-a"}}, False),
        (_pinned("dra-a"), False),
        (_pinned("dra-a", "dp"), True),  # the device-plugin pool can take it
        ({}, True),  # unpinned: the extender places it on a device-plugin pool
    ],
    ids=["nodeSelector on a dra pool", "affinity on a dra pool", "a dra and a device-plugin pool", "no pool named"],
)
def test_a_gpu_core_pod_that_can_only_land_on_a_dra_pool_is_told_how_to_ask(dra_webhook: WebhookClient, spec: dict[str, Any], allowed: bool) -> None:
    body = review_body(pod(container("main", {CORE: "30"}), **spec))
    response = dra_webhook.review(body)
    assert response["allowed"] is allowed
    if not allowed:
        assert response["status"]["message"] == (
            "tessera: pool dra-a hands out GPUs through DRA (allocation: dra), not tessera.dev/gpu-core: ask with a ResourceClaim "
            "(or ResourceClaimTemplate) on DeviceClass dra-a.gpu.tessera.dev for capacity cores and memory (docs/dra.md), or pin the pod to a device-plugin pool"
        )
