"""Everything Tessera renders works at the Kubernetes versions TKE offers, 1.34 included: every
object is valid for the version's schemas (strict), and a shared GPU pod goes the whole way (webhook,
kube-scheduler with the extender, bind, the kubelet emulator of that release, the device plugin)
with the kube-scheduler image of the version's catalog record."""
from __future__ import annotations

import copy

import kubernetes_validate
import pytest
from e2e_cluster import E2ECluster, job_pod
from e2e_stack import Rendered, dev_mapping, nvidia_pool, shared_pool

from tessera.model import from_pulumi_mapping
from tessera.model.catalog.kubernetes import TKE_VERSIONS
from tessera.model.contract import GPU_CORE, GPU_MEMORY, SCHEDULER_NAME
from tessera.model.stack import StackConfig

# kinds kubernetes-validate has no schema for; tests/tessera/manifests/test_schema.py says why each is safe
CUSTOM = {"ServiceMonitor", "PrometheusRule", "PodMonitor", "ClusterPolicy"}


def _stack_at(version: str) -> StackConfig:
    mapping = copy.deepcopy(dev_mapping())
    mapping["cluster"]["kubernetesVersion"] = version
    mapping["nodePools"] = [nvidia_pool(), shared_pool(policy="fixed-share")]
    return from_pulumi_mapping(mapping)


@pytest.mark.parametrize("version", sorted(TKE_VERSIONS)[-3:])
def test_every_rendered_object_is_valid_for_the_clusters_version(version: str) -> None:
    rendered = Rendered(_stack_at(version))
    problems = []
    for o in rendered.objects():
        if o["kind"] in CUSTOM:
            continue
        try:
            kubernetes_validate.validate(o, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{o['kind']}/{o['metadata']['name']}: {error.message}")
    assert problems == []


def test_a_shared_pod_runs_on_a_1_34_cluster() -> None:
    version = TKE_VERSIONS["1.34.1"]
    config = _stack_at(version.version)
    image = Rendered(config).pod_spec("Deployment", SCHEDULER_NAME)["containers"][0]["image"]
    assert image == f"registry.k8s.io/kube-scheduler:{version.kube_scheduler_tag}"
    cluster = E2ECluster(config)
    try:
        assert all(node.kubelet.version.name == "1.34" for node in cluster.nodes.values())
        _pod, views = cluster.submit_and_run(job_pod("v134", {GPU_CORE: 30, GPU_MEMORY: 2048}))
        env = views["main"].env
        assert env["TESSERA_GPU_CORE"] == "30" and env["TESSERA_GPU_MEMORY_MIB"] == "2048"
    finally:
        cluster.close()
