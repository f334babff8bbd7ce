"""The Job manifests of docs/scenarios/ are what a user applies on a real cluster: they must be
schema-valid for the cluster's Kubernetes version and behave as docs/scenarios.md says on a
cluster shaped like stacks/Pulumi.dev.yaml (run here through the whole simulated chain)."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from e2e_cluster import E2ECluster
from e2e_stack import REPO, Rendered

from tessera.model.loader import load_stack_file
from tessera.model.contract import GPU_CORE, GPU_MEMORY

SCENARIOS = REPO / "docs" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.yaml"))


def _jobs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _pod_of(job: dict[str, Any]) -> dict[str, Any]:
    """The pod the Job controller creates (name and labels aside)."""
    template = copy.deepcopy(job["spec"]["template"])
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": job["metadata"]["name"] + "-pod", "namespace": "default", "annotations": meta.get("annotations") or {}, "labels": meta.get("labels") or {}},
        "spec": template["spec"],
    }


@pytest.fixture(scope="module")
def dev() -> Iterator[E2ECluster]:
    cluster = E2ECluster(load_stack_file(REPO / "stacks" / "Pulumi.dev.yaml"))
    yield cluster
    cluster.close()


def test_there_is_a_manifest_for_each_seed_scene() -> None:
    assert [p.name for p in FILES] == ["s1-exclusive.yaml", "s2-sharing.yaml", "s3-isolation.yaml", "s4-online-offline.yaml"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_scenario_manifests_are_valid_for_kubernetes_1_30(path: Path) -> None:
    for job in _jobs(path):
        kubernetes_validate.validate(job, "1.30.0", strict=True)


def test_priority_classes_the_manifests_name_are_rendered() -> None:
    rendered = Rendered(load_stack_file(REPO / "stacks" / "Pulumi.dev.yaml"))
    names = {o["metadata"]["name"] for o in rendered.objects() if o["kind"] == "PriorityClass"}
    used = {job["spec"]["template"]["spec"].get("priorityClassName") for path in FILES for job in _jobs(path)} - {None}
    assert used <= names


def test_s1_manifest_one_job_runs_one_pending(dev: E2ECluster) -> None:
    nodes = []
    for job in _jobs(SCENARIOS / "s1-exclusive.yaml"):
        pod = dev.create(_pod_of(job))
        nodes.append(dev.schedule("default", pod["metadata"]["name"]).node)
        assert pod["spec"].get("schedulerName") is None, "whole GPUs stay with the default scheduler"
    assert nodes == ["t4-exclusive-0", None]
    for job in _jobs(SCENARIOS / "s1-exclusive.yaml"):
        dev.delete("default", job["metadata"]["name"] + "-pod")


@pytest.mark.parametrize("path", [SCENARIOS / n for n in ("s2-sharing.yaml", "s3-isolation.yaml", "s4-online-offline.yaml")], ids=lambda p: p.name)
def test_shared_pool_manifests_run_with_the_limits_they_ask_for(dev: E2ECluster, path: Path) -> None:
    for job in _jobs(path):
        pod, views = dev.submit_and_run(_pod_of(job))
        limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        env = views["main"].env
        assert env["TESSERA_GPU_CORE"] == limits[GPU_CORE]
        if GPU_MEMORY in limits:
            assert env["TESSERA_GPU_MEMORY_MIB"] == limits[GPU_MEMORY]
        dev.delete("default", pod["metadata"]["name"])
