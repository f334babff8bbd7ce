"""S3 (isolation policy), S4 (online/offline) and S5 (fine grain, observability): the node side.

Pods are admitted, scheduled and started through the whole chain; then the real node agent,
reading the registry the device plugin wrote at PreStartContainer and the rendered pools file,
acts on the simulated GPUs (processes scripted per container) and a fake cgroup tree.
"""
from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from e2e_cluster import E2ECluster, job_pod, wait_until
from e2e_stack import shared_pool, stack

from tessera.model.contract import ANNOTATION_ALLOCATION, ANNOTATION_GPU_INDEX_PREFIX, GPU_CORE, GPU_MEMORY, Allocation
from tessera_node.agent.colocation import REASON_PAUSED, REASON_RESUMED
from tessera_node.agent.metrics import serve_metrics
from tessera_node.registry import ContainerRegistry

NODE = "t4-shared-0"


def _registered(cluster: E2ECluster, count: int) -> bool:
    """The agent's registry file (written by the device plugin) holds `count` containers."""
    return len(ContainerRegistry(cluster.nodes[NODE].settings.state_dir).all()) == count


# --- S3 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["fixed-share", "best-effort"])
def test_s3_policy_decides_the_compute_cap(policy: str) -> None:
    cluster = E2ECluster(stack(shared_pool(policy=policy)))
    try:
        big, big_views = cluster.submit_and_run(job_pod("s3-60", {GPU_CORE: 60, GPU_MEMORY: 6144}))
        small, small_views = cluster.submit_and_run(job_pod("s3-30", {GPU_CORE: 30, GPU_MEMORY: 3072}))
        views = {"s3-60": big_views["main"], "s3-30": small_views["main"]}
        for view in views.values():
            assert view.env["TESSERA_SHARING_POLICY"] == policy
        assert views["s3-60"].env["TESSERA_GPU_MEMORY_MIB"] == "6144"
        assert views["s3-30"].env["TESSERA_GPU_MEMORY_MIB"] == "3072"
        node = cluster.nodes[NODE]
        assert wait_until(lambda: _registered(cluster, 2)), "PreStartContainer registers both containers with the agent"
        agent = cluster.start_agent(NODE)
        node.tick(1.0)
        gpu = agent.build_view().gpus[0]
        mps_mounted = [any(m[0] == "/run/tessera/mps" for m in v.mounts) for v in views.values()]
        if policy == "fixed-share":
            # 60/30 SM caps (about 2:1 throughput on a real GPU) come from MPS: the thread
            # percentage from the ConfigMap plus the daemon the agent runs for the GPU
            assert views["s3-60"].env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "60"
            assert views["s3-30"].env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
            assert views["s3-60"].env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=6144M"
            assert views["s3-30"].env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3072M"
            assert mps_mounted == [True, True]
            assert gpu.mps_daemon_running, "the agent runs the GPU's MPS control daemon"
        else:
            # no MPS daemon, no pipe directory and no CUDA_MPS_* env in the container: both
            # jobs compete freely for the GPU (about the same rate)
            assert mps_mounted == [False, False]
            assert not any(k.startswith("CUDA_MPS_") for v in views.values() for k in v.env)
            assert not gpu.mps_daemon_running
        assert gpu.core_allocated_pct == 90
    finally:
        cluster.close()


def test_s3_burst_share_time_slices_contention_by_gpu_core_and_lends_idle_compute() -> None:
    cluster = E2ECluster(stack(shared_pool(policy="burst-share")))
    try:
        big, _ = cluster.submit_and_run(job_pod("s3b-60", {GPU_CORE: 60, GPU_MEMORY: 6144}))
        small, _ = cluster.submit_and_run(job_pod("s3b-30", {GPU_CORE: 30, GPU_MEMORY: 3072}))
        assert wait_until(lambda: _registered(cluster, 2))
        node = cluster.nodes[NODE]
        cgroups = {"s3b-60": cluster.start_process(big, "main", sm_pct=90), "s3b-30": cluster.start_process(small, "main", sm_pct=90)}
        cluster.start_agent(NODE)
        assert node.cgroups is not None
        running = {"s3b-60": 0, "s3b-30": 0}
        for _ in range(60):  # three 2 s control periods at the default 100 ms tick
            node.tick(0.1)
            now_running = [name for name, path in cgroups.items() if not node.cgroups.is_frozen_requested(path)]
            assert len(now_running) == 1, "under contention exactly one of them owns the GPU at a time"
            running[now_running[0]] += 1
        # GPU time follows gpu-core 60:30 (2/3 of the ticks), up to the slot quantisation of 100 ms ticks
        assert abs(running["s3b-60"] / 60 - 2 / 3) <= 0.08, f"GPU time should follow gpu-core 60:30, got {running}"
        node.backend.remove_process(node.pids[(small["metadata"]["uid"], "main")])  # the 30 % job finishes
        for _ in range(40):
            node.tick(0.1)
        assert not node.cgroups.is_frozen_requested(cgroups["s3b-60"]), "alone, it may use the idle compute"
    finally:
        cluster.close()


# --- S4 -------------------------------------------------------------------------------------------
def test_s4_offline_job_pauses_while_online_job_works_and_resumes_after() -> None:
    cluster = E2ECluster(stack(shared_pool(policy="best-effort", online_offline=True, offlineResumeIdleSeconds=2.0)))
    try:
        offline, _ = cluster.submit_and_run(job_pod("s4-offline", {GPU_CORE: 50, GPU_MEMORY: 7168}, app_class="offline"))
        online, _ = cluster.submit_and_run(job_pod("s4-online", {GPU_CORE: 50, GPU_MEMORY: 7168}, app_class="online"))
        node = cluster.nodes[NODE]
        assert wait_until(lambda: _registered(cluster, 2))
        cluster.start_agent(NODE)
        assert node.cgroups is not None
        pod_cgroup = {
            "s4-offline": cluster.start_process(offline, "main", sm_pct=95),
            "s4-online": cluster.start_process(online, "main", sm_pct=0),
        }
        node.tick()
        assert not node.cgroups.is_frozen_requested(pod_cgroup["s4-offline"]), "offline runs while online is idle"
        cluster.start_process(online, "main", sm_pct=80)  # a burst of online requests
        node.tick()
        assert node.cgroups.is_frozen_requested(pod_cgroup["s4-offline"]), "offline is paused within one tick"
        assert not node.cgroups.is_frozen_requested(pod_cgroup["s4-online"])
        cluster.start_process(online, "main", sm_pct=0)  # the burst is over
        node.tick(1.0)
        assert node.cgroups.is_frozen_requested(pod_cgroup["s4-offline"]), "stays paused during the idle window"
        node.tick(1.5)
        assert not node.cgroups.is_frozen_requested(pod_cgroup["s4-offline"]), "resumed after 2 s of online idleness"
        reasons = [e["reason"] for e in cluster.api.list_events() if e.get("involvedObject", {}).get("name") == "s4-offline"]
        assert reasons == [REASON_PAUSED, REASON_RESUMED]
    finally:
        cluster.close()


# --- S5 -------------------------------------------------------------------------------------------
def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in the metrics")


def test_s5_one_percent_one_mib_and_per_container_metrics(tmp_path: Path) -> None:
    cluster = E2ECluster(stack(shared_pool(policy="best-effort")))
    server = None
    try:
        tiny, views = cluster.submit_and_run(job_pod("s5-tiny", {GPU_CORE: 1, GPU_MEMORY: 1}))
        assert views["main"].env["TESSERA_GPU_CORE"] == "1"
        assert views["main"].env["TESSERA_GPU_MEMORY_MIB"] == "1"
        allocation = Allocation.from_json(tiny["metadata"]["annotations"][ANNOTATION_ALLOCATION])
        assert allocation.node == NODE
        assert tiny["metadata"]["annotations"][ANNOTATION_GPU_INDEX_PREFIX + "main"] == str(allocation.containers["main"][0].index)
        pair, _ = cluster.submit_and_run(
            job_pod("s5-pair", {}, containers={"infer": {GPU_CORE: 20, GPU_MEMORY: 2048}, "embed": {GPU_CORE: 10, GPU_MEMORY: 1024}})
        )
        assert wait_until(lambda: _registered(cluster, 3))
        cluster.start_process(pair, "infer", sm_pct=35, memory_mib=1500)
        cluster.start_process(pair, "embed", sm_pct=5, memory_mib=700)
        agent = cluster.start_agent(NODE)  # learns the containers' runtime ids from the pods
        node = cluster.nodes[NODE]
        node.tick(1.0)
        node.tick(1.0)
        agent.publish()
        server, _thread, port = serve_metrics(agent.view.get, "127.0.0.1", 0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        mib = 1024 * 1024
        assert _metric(text, "tessera_container_gpu_memory_limit_bytes", pod="s5-tiny", container="main") == 1 * mib
        assert _metric(text, "tessera_container_gpu_memory_used_bytes", pod="s5-pair", container="infer") == 1500 * mib
        assert _metric(text, "tessera_container_gpu_memory_used_bytes", pod="s5-pair", container="embed") == 700 * mib
        assert _metric(text, "tessera_container_gpu_utilization_percent", pod="s5-pair", container="infer") == 35
        assert _metric(text, "tessera_gpu_core_allocated_percent") == 31
        assert re.search(r'tessera_container_gpu_core_allocated_percent\{[^}]*container="embed"[^}]*\} 10', text)
    finally:
        if server is not None:
            server.shutdown()
        cluster.close()


def test_s5_sibling_containers_are_not_killed_before_their_ids_are_known() -> None:
    cluster = E2ECluster(stack(shared_pool(policy="best-effort", memoryEnforcement="enforce")))
    try:
        pair, _ = cluster.submit_and_run(
            job_pod("s5-siblings", {}, containers={"infer": {GPU_CORE: 20, GPU_MEMORY: 2048}, "embed": {GPU_CORE: 10, GPU_MEMORY: 1024}})
        )
        assert wait_until(lambda: _registered(cluster, 2))
        cluster.start_agent(NODE)  # running before the containers' processes appear, as on a real node
        cluster.start_process(pair, "infer", sm_pct=35, memory_mib=1500)  # within its 2048 MiB
        cluster.start_process(pair, "embed", sm_pct=5, memory_mib=700)  # within its 1024 MiB
        cluster.nodes[NODE].tick(1.0)
        killed = [e["message"] for e in cluster.api.list_events() if e["reason"] == "TesseraGPUMemoryExceeded"]
        assert killed == [], "no container exceeded its own gpu-memory"
    finally:
        cluster.close()
