"""S8 on the workloads of examples/triton/Pulumi.triton.yaml: the rendered Deployments' pods go through
Tessera's real webhook, the kube-scheduler emulator with the real extender, and kubelet with the
real device plugin, and land where the stack says, with the share it says."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_cluster import E2ECluster
from e2e_stack import REPO, KubeObject

from tessera.model.contract import GPU_CORE, SCHEDULER_NAME
from tessera.model.loader import load_stack_file

EXAMPLE = REPO / "examples" / "triton" / "Pulumi.triton.yaml"


@pytest.fixture(scope="module")
def triton() -> Iterator[E2ECluster]:
    """One node per pool: a100-mig (2 x A100, NVIDIA's plugin) and t4-shared (4 x T4, Tessera's)."""
    cluster = E2ECluster(load_stack_file(EXAMPLE))
    # NVIDIA's device plugin (not run here) advertises the pool's slices: all-1g.5gb on 2 A100s
    cluster.api.patch_node_status_capacity("a100-mig-0", {"nvidia.com/mig-1g.5gb": "14"})
    yield cluster
    cluster.close()


def _replica(cluster: E2ECluster, workload: str, index: int) -> KubeObject:
    """A pod the Deployment's ReplicaSet would create from the rendered template."""
    deployment = cluster.rendered.find("Deployment", workload)
    template: dict[str, Any] = copy.deepcopy(deployment["spec"]["template"])
    meta = template["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{workload}-{index}", "namespace": deployment["metadata"]["namespace"], "labels": meta["labels"], "annotations": meta.get("annotations", {})},
        "spec": template["spec"],
    }


def test_shared_pool_replicas_get_their_half_gpu_until_the_node_is_full(triton: E2ECluster) -> None:
    # 4 T4s per node, 50 % and 6 GiB each: 8 replicas fit on one node, the 9th waits for a node
    seen_gpus = []
    for i in range(8):
        pod, views = triton.submit_and_run(_replica(triton, "triton-bert", i))
        assert pod["spec"]["nodeName"] == "t4-shared-0" and pod["spec"]["schedulerName"] == SCHEDULER_NAME
        env = views["triton-bert"].env
        assert (env["TESSERA_GPU_CORE"], env["TESSERA_GPU_MEMORY_MIB"]) == ("50", "6144")
        seen_gpus.append(env["NVIDIA_VISIBLE_DEVICES"])
    assert sorted(seen_gpus.count(g) for g in set(seen_gpus)) == [2, 2, 2, 2], "two halves per T4"
    triton.create(_replica(triton, "triton-bert", 8))
    ninth = triton.schedule("inference", "triton-bert-8")
    assert ninth.node is None and ninth.error, "the node's GPUs are full: Pending until the pool grows"
    used = sum(int(p["spec"]["containers"][0]["resources"]["limits"][GPU_CORE]) for p in triton.api.list_pods(node_name="t4-shared-0"))
    assert used == 400
    for i in range(9):
        triton.delete("inference", f"triton-bert-{i}")


def test_mig_replicas_land_on_the_mig_pool_only(triton: E2ECluster) -> None:
    created = triton.create(_replica(triton, "tritonserver", 0))
    assert "schedulerName" not in created["spec"], "no tessera.dev/* resource: the default scheduler places it"
    attempt = triton.schedule("inference", "tritonserver-0")
    assert attempt.node == "a100-mig-0"
    triton.delete("inference", "tritonserver-0")
