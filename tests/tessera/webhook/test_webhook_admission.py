"""The webhook driven over real HTTPS on 127.0.0.1 with AdmissionReview v1 documents."""
from __future__ import annotations

import json
import ssl
import threading
from typing import Any

import pytest
from webhook_helpers import SETTINGS, WebhookClient, container, pod, review_body, start_webhook

from tessera.model import contract
from tessera.webhook.server import ServerSettings
from tessera.webhook.tls import CertBundle

UID = "0f3c1a52-8d7e-4b7a-9a51-2b2f0c6d9e11"
CONFIGMAP = f"tessera-alloc-{UID}"


def _env_names(c: dict[str, Any]) -> list[str]:
    return [e["name"] for e in c.get("env", [])]


def test_fractional_pod_gets_scheduler_configmap_and_env(webhook: WebhookClient) -> None:
    gpu = container(
        "trainer",
        {contract.GPU_CORE: "40", contract.GPU_MEMORY: "5120"},
        env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "EPOCHS", "value": "3"}],
    )
    sidecar = container("logger")
    patched, response = webhook.mutate(pod(gpu, sidecar))

    assert response["allowed"] is True
    assert patched["spec"]["schedulerName"] == contract.SCHEDULER_NAME
    assert patched["metadata"]["annotations"] == {contract.ANNOTATION_ALLOCATION_CONFIGMAP: CONFIGMAP}
    trainer, logger = patched["spec"]["containers"]
    # the user's NVIDIA_VISIBLE_DEVICES=all is gone: the device list only comes from the allocation
    assert _env_names(trainer) == ["EPOCHS", *contract.ALLOCATION_ENV_KEYS]
    refs = {e["name"]: e["valueFrom"]["configMapKeyRef"] for e in trainer["env"] if "valueFrom" in e}
    assert refs["NVIDIA_VISIBLE_DEVICES"] == {"name": CONFIGMAP, "key": "trainer.NVIDIA_VISIBLE_DEVICES", "optional": False}
    assert refs["CUDA_MPS_PIPE_DIRECTORY"]["optional"] is True
    assert logger == sidecar  # a container without GPU resources is left alone
    assert trainer["resources"] == gpu["resources"]


def test_gpu_init_containers_are_rejected_because_the_extender_serves_app_containers_only(webhook: WebhookClient) -> None:
    init = container("warmup", {contract.GPU_CORE: "10"})
    response = webhook.review(review_body(pod(container("main", {contract.GPU_CORE: "10"}), initContainers=[init])))
    assert response["allowed"] is False
    assert "init container 'warmup'" in response["status"]["message"]
    # an init container without GPU resources is fine, and untouched
    patched, _ = webhook.mutate(pod(container("main", {contract.GPU_CORE: "10"}), initContainers=[container("setup")]))
    assert patched["spec"]["initContainers"] == [container("setup")]


def test_pod_without_gpu_resources_is_untouched(webhook: WebhookClient) -> None:
    plain = pod(container("web", {"cpu": "1"}))
    patched, response = webhook.mutate(plain)
    assert response == {"uid": UID, "allowed": True}
    assert patched == plain


def test_existing_annotation_is_kept_so_reinvocation_is_idempotent(webhook: WebhookClient) -> None:
    first, _ = webhook.mutate(pod(container("c", {contract.GPU_CORE: "100"})))
    second, _ = webhook.mutate(first)
    assert second == first


@pytest.mark.parametrize(
    ("qgpu", "expected"),
    [
        ({contract.QGPU_CORE: "40", contract.QGPU_MEMORY: "5"}, {contract.GPU_CORE: "40", contract.GPU_MEMORY: "5120"}),
        ({contract.QGPU_CORE: "30"}, {contract.GPU_CORE: "30"}),
        ({contract.QGPU_CORE: "100", contract.QGPU_MEMORY: "1"}, {contract.GPU_CORE: "100", contract.GPU_MEMORY: "1024"}),
        ({contract.QGPU_CORE: "200", contract.QGPU_MEMORY: "16"}, {contract.GPU_CORE: "200", contract.GPU_MEMORY: "16384"}),
        ({contract.QGPU_CORE: 60, contract.QGPU_MEMORY: 6, "cpu": "2"}, {contract.GPU_CORE: "60", contract.GPU_MEMORY: "6144", "cpu": "2"}),
    ],
)
def test_qgpu_names_map_on_opted_in_pool(webhook: WebhookClient, qgpu: dict[str, Any], expected: dict[str, str]) -> None:
    c = container("infer")
    c["resources"] = {"limits": dict(qgpu), "requests": dict(qgpu)}
    patched, _ = webhook.mutate(pod(c, node_selector={contract.LABEL_POOL: "shared-a"}))
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources == {"limits": expected, "requests": expected}
    assert patched["spec"]["schedulerName"] == contract.SCHEDULER_NAME


def test_qgpu_names_map_in_opted_in_namespace_path(webhook: WebhookClient) -> None:
    # shared-b did not opt in, but the namespace did (the qgpu webhook entry uses /mutate/qgpu)
    c = container("infer", {contract.QGPU_CORE: "50", contract.QGPU_MEMORY: "2"})
    patched, _ = webhook.mutate(pod(c, node_selector={contract.LABEL_POOL: "shared-b"}), path="/mutate/qgpu")
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {contract.GPU_CORE: "50", contract.GPU_MEMORY: "2048"}


def test_qgpu_names_map_through_required_node_affinity(webhook: WebhookClient) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": contract.LABEL_POOL, "operator": "In", "values": ["shared-a"]}]}]
            }
        }
    }
    patched, _ = webhook.mutate(pod(container("c", {contract.QGPU_CORE: "20"}), affinity=affinity))
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {contract.GPU_CORE: "20"}


@pytest.mark.parametrize(
    "node_selector",
    [None, {contract.LABEL_POOL: "shared-b"}],
    ids=["unpinned-while-shared-b-did-not-opt-in", "pinned-to-shared-b"],
)
def test_qgpu_names_are_left_alone_with_a_warning_when_not_opted_in(webhook: WebhookClient, node_selector: dict[str, str] | None) -> None:
    original = pod(container("c", {contract.QGPU_CORE: "40"}), node_selector=node_selector)
    patched, response = webhook.mutate(original)
    assert patched == original
    assert response["allowed"] is True
    assert any("opted in" in w for w in response["warnings"])


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({contract.GPU_CORE: "150"}, "multiple of 100"),
        ({contract.GPU_CORE: "0"}, "1..100"),
        ({contract.GPU_CORE: "0.5"}, "whole number"),
        ({contract.GPU_MEMORY: "4096"}, "without tessera.dev/gpu-core"),
        ({contract.GPU_CORE: "50", contract.GPU_MEMORY: "0"}, "gpu-memory=0"),
        ({contract.GPU_CORE: "50", contract.NVIDIA_GPU: "1"}, "nvidia.com/gpu"),
        ({contract.GPU_CORE: "50", "tessera.dev/gpu-cores": "1"}, "unknown resource"),
        ({contract.QGPU_MEMORY: "4"}, "without tke.cloud.tencent.com/qgpu-core"),
        ({contract.QGPU_CORE: "40", contract.GPU_MEMORY: "4096"}, "mixes"),
        ({contract.QGPU_CORE: "120"}, "multiple of 100"),
    ],
)
def test_invalid_requests_are_rejected_with_a_clear_message(webhook: WebhookClient, limits: dict[str, str], fragment: str) -> None:
    response = webhook.review(review_body(pod(container("worker", limits), node_selector={contract.LABEL_POOL: "shared-a"})))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("tessera: container 'worker'")
    assert fragment in message
    assert "patch" not in response


def test_pod_with_foreign_scheduler_name_is_rejected(webhook: WebhookClient) -> None:
    response = webhook.review(review_body(pod(container("c", {contract.GPU_CORE: "10"}), schedulerName="volcano")))
    assert response["allowed"] is False
    assert "remove schedulerName" in response["status"]["message"]


@pytest.mark.parametrize(("operation", "kind"), [("UPDATE", "Pod"), ("CREATE", "Deployment")])
def test_other_operations_and_kinds_pass_unchanged(webhook: WebhookClient, operation: str, kind: str) -> None:
    body = review_body(pod(container("c", {contract.GPU_CORE: "10"})), operation=operation, kind=kind)
    assert webhook.review(body) == {"uid": UID, "allowed": True}


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/mutate", b"{not json", 400),
        ("/mutate", json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(), 400),
        ("/mutate", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), 400),
        ("/elsewhere", b"{}", 404),
    ],
)
def test_malformed_requests_get_http_errors(webhook: WebhookClient, path: str, body: bytes, status: int) -> None:
    assert webhook.request("POST", path, body)[0] == status


def test_health_endpoint(webhook: WebhookClient) -> None:
    assert webhook.request("GET", "/healthz") == (200, b"ok\n")


def test_stop_drains_not_ready_then_shuts_down(localhost_bundle: CertBundle) -> None:
    stop = threading.Event()
    server, thread = start_webhook(SETTINGS, localhost_bundle, ServerSettings(host="127.0.0.1", port=0, drain_s=3.0), stop)
    client = WebhookClient(server.server_address[1], ssl.create_default_context(cadata=localhost_bundle.ca_pem))
    assert client.request("GET", "/readyz")[0] == 200
    stop.set()
    assert server.draining.wait(10)
    # while draining: not ready (the Service stops routing here) but still answering reviews
    assert client.request("GET", "/readyz")[0] == 503
    assert client.review(review_body(pod(container("c", {contract.GPU_CORE: "10"}))))["allowed"] is True
    thread.join(20)
    assert not thread.is_alive()
