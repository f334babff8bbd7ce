"""S1 (exclusive nvidia pool) and S2 (sharing on a shared pool), seed 000 scenes 1 and 2.

Every pod goes through the real webhook (HTTPS), kube-scheduler's filters plus the real extender
(HTTP), the kubelet emulator and the real device plugin (gRPC on unix sockets); assertions are on
what a user sees: pod phase/placement, node allocatable, the env inside the container.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_cluster import E2ECluster, PodRefused, job_pod, wait_until
from e2e_stack import node_labels, node_taints, nvidia_pool, runs_on, shared_pool, stack

from tessera.model.contract import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_NODE_GPUS,
    GPU_CORE,
    GPU_MEMORY,
    LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY,
    NVIDIA_GPU,
    QGPU_CORE,
    QGPU_MEMORY,
    Allocation,
)
from tessera.manifests.stack import gpu_operator_release
from tessera_node.registry import ContainerRegistry

T4_MIB = 15360


@pytest.fixture(scope="module")
def mixed() -> Iterator[E2ECluster]:
    """The dev stack's shape: a 1-GPU nvidia pool and a 1-GPU shared pool."""
    cluster = E2ECluster(stack(nvidia_pool(), shared_pool(policy="fixed-share")))
    yield cluster
    cluster.close()


def _gpu_of(pod: dict, container: str = "main") -> str:  # type: ignore[type-arg]
    allocation = Allocation.from_json(pod["metadata"]["annotations"][ANNOTATION_ALLOCATION])
    return ",".join(s.uuid for s in allocation.containers[container])


# --- S1 -------------------------------------------------------------------------------------------
def test_s1_nvidia_pool_runs_nvidias_device_plugin_and_not_tesseras(mixed: E2ECluster) -> None:
    config = mixed.config
    tessera_plugin = mixed.rendered.pod_spec("DaemonSet", "tessera-node")
    nvidia_node = (node_labels(config, "t4-exclusive"), node_taints(config, "t4-exclusive"))
    shared_node = (node_labels(config, "t4-shared"), node_taints(config, "t4-shared"))
    assert not runs_on(tessera_plugin, *nvidia_node), "Tessera's device plugin must not run on the nvidia pool"
    assert runs_on(tessera_plugin, *shared_node), "Tessera's device plugin must run on the shared pool"
    # gpu-operator deploys its device plugin on every GPU node except those labelled off
    release = gpu_operator_release(config)
    assert release is not None and release.values["devicePlugin"]["enabled"] is True
    assert nvidia_node[0].get(LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY) != "false"
    assert shared_node[0].get(LABEL_NVIDIA_DEVICE_PLUGIN_DEPLOY) == "false"
    operator_tolerations = release.values["daemonsets"]["tolerations"]
    assert runs_on({"tolerations": operator_tolerations}, *nvidia_node), "the operator's DaemonSets must tolerate the GPU taint"


def test_s1_second_exclusive_job_stays_pending(mixed: E2ECluster) -> None:
    names = ["s1-job-a", "s1-job-b"]
    attempts = []
    for name in names:
        pod, response = mixed.admit(job_pod(name, {NVIDIA_GPU: 1}, tolerate="nvidia"))
        assert "patch" not in response, "the webhook leaves nvidia.com/gpu pods alone"
        mixed.api.create_pod(pod)
        attempts.append(mixed.schedule("default", name))
    assert attempts[0].node == "t4-exclusive-0"
    assert attempts[1].node is None, "the 1-GPU nvidia node is taken: the second Job stays Pending"
    for name in names:
        mixed.delete("default", name)


def test_s1_whole_gpu_on_a_shared_node_is_exclusive_too(mixed: E2ECluster) -> None:
    first, views = mixed.submit_and_run(job_pod("s1-whole-a", {GPU_CORE: 100}))
    assert views["main"].env["TESSERA_GPU_CORE"] == "100"
    assert views["main"].env["TESSERA_GPU_MEMORY_MIB"] == str(T4_MIB), "a whole GPU gets all of its memory"
    mixed.create(job_pod("s1-whole-b", {GPU_CORE: 100}))
    second = mixed.schedule("default", "s1-whole-b")
    assert second.node is None and second.error, "no second whole GPU on a 1-GPU node: Pending"
    for name in ("s1-whole-a", "s1-whole-b"):
        mixed.delete("default", name)


# --- S2 -------------------------------------------------------------------------------------------
def test_s2_node_allocatable_shows_compute_and_memory(mixed: E2ECluster) -> None:
    node = mixed.api.get_node("t4-shared-0")
    allocatable = node["status"]["allocatable"]
    assert allocatable[GPU_CORE] == "100", "100 gpu-core per GPU (kubelet counts the plugin's devices)"
    assert allocatable[GPU_MEMORY] == str(T4_MIB), "gpu-memory in MiB, patched by the device plugin"
    devices = mixed.nodes["t4-shared-0"].kubelet.devices(GPU_CORE)
    assert len(devices) == 100 and set(devices.values()) == {"Healthy"}
    assert ANNOTATION_NODE_GPUS in node["metadata"]["annotations"], "the extender's GPU inventory"


def test_s2_container_sees_its_5gib_limit_and_its_gpu(mixed: E2ECluster) -> None:
    pod, views = mixed.submit_and_run(job_pod("s2-5g", {GPU_CORE: 40, GPU_MEMORY: 5120}))
    env = views["main"].env
    assert env["TESSERA_GPU_MEMORY_MIB"] == "5120"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=5120M"
    assert env["NVIDIA_VISIBLE_DEVICES"] == _gpu_of(pod), "the container sees exactly the GPU recorded on the pod"
    assert views["main"].env_conflicts == ()
    mixed.delete("default", "s2-5g")


@pytest.mark.parametrize(("enforcement", "stopped"), [("enforce", True), ("warn", False)])
def test_s2_job_over_its_gpu_memory_is_stopped_or_warned(enforcement: str, stopped: bool) -> None:
    cluster = E2ECluster(stack(shared_pool(memoryEnforcement=enforcement)))
    try:
        pod, _ = cluster.submit_and_run(job_pod("s2-greedy", {GPU_CORE: 40, GPU_MEMORY: 5120}))
        node = cluster.nodes["t4-shared-0"]
        assert wait_until(lambda: len(ContainerRegistry(node.settings.state_dir).all()) == 1), "registered at PreStartContainer"
        cluster.start_process(pod, "main", sm_pct=50, memory_mib=6144)  # allocates 6 GiB of its 5 GiB
        cluster.start_agent("t4-shared-0")
        node.tick(1.0)
        events = [e for e in cluster.api.list_events() if e.get("involvedObject", {}).get("name") == "s2-greedy"]
        assert [e["type"] for e in events] == ["Warning"], "the user is told, with a Kubernetes event"
        assert "5120 MiB" in events[0]["message"]
        assert (node.backend.processes() == []) is stopped
    finally:
        cluster.close()


def test_s2_a_container_cannot_take_gpus_from_both_device_plugins(mixed: E2ECluster) -> None:
    with pytest.raises(PodRefused, match="nvidia.com/gpu"):
        mixed.create(job_pod("s2-both", {GPU_CORE: 50, NVIDIA_GPU: 1}))


def test_s2_init_container_gpu_shares_are_refused_at_admission(mixed: E2ECluster) -> None:
    """The extender allocates app containers only; the webhook must not let such a pod in to fail
    later at PreStartContainer (no allocation for the init container)."""
    pod = job_pod("s2-init", {GPU_CORE: 20})
    pod["spec"]["initContainers"] = [{"name": "warmup", "image": "cuda:12", "resources": {"limits": {GPU_CORE: "10"}}}]
    with pytest.raises(PodRefused, match="init container"):
        mixed.create(pod)


@pytest.mark.parametrize(("placement", "same_gpu"), [("binpack", True), ("spread", False)])
def test_s2_binpack_shares_one_gpu_spread_uses_both(placement: str, same_gpu: bool) -> None:
    cluster = E2ECluster(stack(shared_pool(placement=placement, instance_type="GN7.10XLARGE160")))
    try:
        a, _ = cluster.submit_and_run(job_pod("s2-40", {GPU_CORE: 40, GPU_MEMORY: 4096}))
        b, _ = cluster.submit_and_run(job_pod("s2-30", {GPU_CORE: 30, GPU_MEMORY: 3072}))
        assert a["spec"]["nodeName"] == b["spec"]["nodeName"] == "t4-shared-0"
        assert (_gpu_of(a) == _gpu_of(b)) is same_gpu
    finally:
        cluster.close()


def test_s2_gpu_core_100_gets_a_whole_gpu_of_a_two_gpu_node() -> None:
    cluster = E2ECluster(stack(shared_pool(placement="binpack", instance_type="GN7.10XLARGE160")))
    try:
        small, _ = cluster.submit_and_run(job_pod("s2-small", {GPU_CORE: 10}))
        whole, views = cluster.submit_and_run(job_pod("s2-whole", {GPU_CORE: 100}))
        assert _gpu_of(whole) != _gpu_of(small), "a whole GPU never shares with another pod"
        assert views["main"].env["NVIDIA_VISIBLE_DEVICES"] == _gpu_of(whole)
        assert views["main"].env["TESSERA_GPU_CORE"] == "100"
        cluster.create(job_pod("s2-more", {GPU_CORE: 100}))
        assert cluster.schedule("default", "s2-more").node is None, "both GPUs are used: no second whole GPU"
    finally:
        cluster.close()


def test_s2_gpu_core_200_gets_two_whole_gpus() -> None:
    # fixed-share: the only policy whose containers get MPS memory limits (by device ordinal)
    cluster = E2ECluster(stack(shared_pool(policy="fixed-share", instance_type="GN7.20XLARGE320")))  # 4 x T4
    try:
        pod, views = cluster.submit_and_run(job_pod("s2-two", {GPU_CORE: 200}))
        env = views["main"].env
        assert env["NVIDIA_VISIBLE_DEVICES"] == _gpu_of(pod) and len(env["NVIDIA_VISIBLE_DEVICES"].split(",")) == 2
        assert env["TESSERA_GPU_CORE"] == "200"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={T4_MIB}M,1={T4_MIB}M", "limits by the container's device ordinals"
        assert len(views["main"].devices) == 200, "kubelet handed out 200 gpu-core devices"
    finally:
        cluster.close()


def test_s2_qgpu_manifests_keep_working_on_an_opted_in_pool() -> None:
    cluster = E2ECluster(stack(shared_pool(qgpuAliases=True)))
    try:
        _, views = cluster.submit_and_run(job_pod("s2-qgpu", {QGPU_CORE: 40, QGPU_MEMORY: 5}))
        assert views["main"].env["TESSERA_GPU_MEMORY_MIB"] == "5120", "qgpu-memory is GiB; Tessera's is MiB"
        assert views["main"].env["TESSERA_GPU_CORE"] == "40"
    finally:
        cluster.close()


def test_s2_seed_job_without_tolerations_is_scheduled(mixed: E2ECluster) -> None:
    mixed.create(job_pod("s2-seed", {GPU_CORE: 30, GPU_MEMORY: 3072}, tolerate=None))
    try:
        assert mixed.schedule("default", "s2-seed").node == "t4-shared-0"
    finally:
        mixed.delete("default", "s2-seed")
