"""Every container sees exactly its own GPU and limits, whatever order kubelet calls the plugin in.

Pods are created as users write them, mutated by the real webhook, placed by the real allocation
model and bound with the real allocation record and ConfigMap; the kubelet emulator then calls
Allocate and PreStartContainer over the plugin's unix socket.
"""
from __future__ import annotations

import random
from collections.abc import Callable

import grpc
import pytest
from dp_harness import Harness, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.model.contract import ANNOTATION_ALLOCATION, Allocation
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.testing.kubelet_emulator import StartFailed

Order = Callable[[list[str]], list[str]]


def _expected(h: Harness, pod: str) -> dict[str, dict[str, str]]:
    allocation = Allocation.from_json(h.kube.get_pod("default", pod)["metadata"]["annotations"][ANNOTATION_ALLOCATION])
    return {
        container: {
            "NVIDIA_VISIBLE_DEVICES": ",".join(s.uuid for s in shares),
            "TESSERA_GPU_CORE": str(sum(s.core for s in shares)),
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(shares[0].core),
        }
        for container, shares in allocation.containers.items()
    }


def _check_sees_own(h: Harness, pods: list[str]) -> None:
    for pod in pods:
        for container, expected in _expected(h, pod).items():
            view = h.kubelet.view("default", pod, container)
            assert view is not None, f"{pod}/{container} did not start"
            assert {k: view.env[k] for k in expected} == expected, f"{pod}/{container} sees another pod's GPU or limits"
            assert view.env_conflicts == ()


def _interleave(items: list[str]) -> list[str]:
    return items[::2] + items[1::2][::-1]


ORDERS: dict[str, Order] = {
    "in order": lambda xs: list(xs),
    "reversed": lambda xs: xs[::-1],
    "interleaved": _interleave,
    "shuffled": lambda xs: random.Random(7).sample(xs, len(xs)),
}

# name -> per pod container asks (core %, memory MiB)
Ask = dict[str, tuple[int, int | None]]
WITH_SIDECAR: Ask = {"main": (30, 4096), "sidecar": (10, 1024)}
NO_MEMORY: Ask = {"main": (50, None)}
MULTI: list[Ask] = [WITH_SIDECAR] * 3 + [NO_MEMORY] * 2
WORKLOADS: dict[str, list[Ask]] = {
    "identical": [{"main": (25, 4096)}] * 8,
    "different": [{"main": (c, m)} for c, m in [(10, 1024), (40, 8192), (25, 2048), (60, 16384), (5, 512), (30, 6000), (100, None), (15, 3000)]],
    "multi-container": MULTI,
}


@pytest.mark.parametrize("order_name", list(ORDERS))
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_every_container_sees_its_own_gpu_and_limits(node: Harness, workload: str, order_name: str) -> None:
    order = ORDERS[order_name]
    pods = []
    for i, containers in enumerate(WORKLOADS[workload]):
        h_pod = f"{workload}-{i}"
        node.extender.create_and_bind(h_pod, containers)
        pods.append(h_pod)
    steps = [(p, c) for p in pods for c in WORKLOADS[workload][pods.index(p)]]
    keys = [f"{p}|{c}" for p, c in steps]
    for key in order(keys):
        node.allocate(*key.split("|"))
    for key in order(keys[::-1]):
        node.start(*key.split("|"))
    _check_sees_own(node, pods)
    assert wait_until(lambda: len(node.registry.all()) == len(steps)), "every started container is registered with the agent"


@settings(max_examples=10, deadline=None)
@given(
    asks=st.lists(st.sampled_from([(10, 1024), (20, 2048), (25, 4096), (50, None)]), min_size=2, max_size=6),
    data=st.data(),
)
def test_any_interleaving_of_allocate_and_prestart_keeps_containers_apart(asks: list[tuple[int, int | None]], data: st.DataObject) -> None:
    """Each pod is allocated before it starts (kubelet admits before it starts containers); beyond
    that hypothesis picks any interleaving of the two calls across pods: in a permutation where
    every pod appears twice, its first appearance is Allocate and its second PreStartContainer."""
    schedule = data.draw(st.permutations([i for i in range(len(asks)) for _ in range(2)]))
    h = Harness()
    try:
        h.start_plugin()
        pods = [f"p{i}" for i in range(len(asks))]
        for pod, ask in zip(pods, asks):
            h.extender.create_and_bind(pod, {"main": ask})
        allocated: set[int] = set()
        for i in schedule:
            if i in allocated:
                h.start(pods[i])
            else:
                h.allocate(pods[i])
                allocated.add(i)
        _check_sees_own(h, pods)
    finally:
        h.close()


def test_pod_without_allocation_record_does_not_start(node: Harness) -> None:
    """A pod that bypassed tessera-scheduler has no record: PreStartContainer fails it closed."""
    node.kube.create_pod(
        {
            "metadata": {"name": "rogue", "namespace": "default"},
            "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "main", "resources": {"limits": {"tessera.dev/gpu-core": "30"}}}]},
        }
    )
    node.allocate("rogue")
    with pytest.raises(StartFailed, match="no tessera.dev/allocation record"):
        node.start("rogue")
    assert node.registry.all() == []


def test_pod_whose_env_was_not_wired_by_the_webhook_does_not_start(node: Harness) -> None:
    """Without the ConfigMap env, a CUDA image's NVIDIA_VISIBLE_DEVICES=all would expose every GPU."""
    node.extender.create_and_bind("tampered", {"main": (30, 4096)})
    pod = node.kube.get_pod("default", "tampered")
    # Simulate a pod whose env lost the webhook's wiring (e.g. created while the webhook was down
    # and annotated by hand): replace the pod with the same record but a literal env.
    node.kube.delete_pod("default", "tampered")
    pod["metadata"].pop("uid")
    pod["metadata"].pop("resourceVersion", None)
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    node.kube.create_pod(pod)
    node.allocate("tampered")
    with pytest.raises(StartFailed, match="does not take NVIDIA_VISIBLE_DEVICES from ConfigMap"):
        node.start("tampered")


def test_allocate_rejects_devices_the_plugin_never_advertised(node: Harness) -> None:
    plugin = node.kubelet.plugin("tessera.dev/gpu-core")
    assert plugin is not None
    with pytest.raises(grpc.RpcError) as info:
        plugin.stub.Allocate(dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=["gpu9-core001"])]), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
