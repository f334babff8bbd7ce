"""Preemption on a shared pool: an online pod that needs a whole GPU, on a node whose two GPUs
hold low-priority shares (60 % on one, 30 % + 30 % on the other).

kube-scheduler (configured by the rendered KubeSchedulerConfiguration) counts gpu-core over the
node: 120 % used + 100 % asked > 200 %, so it preempts. Its own choice, keeping the pods that
started first, is the last 30 % share: that leaves 90 % on the node, enough by its sum, but no GPU
idle, and on the next cycle it finds no victim at all, so the pod never runs. With `preemptVerb`
wired, Tessera's /preempt answers with the 60 % share: one GPU freed, the pod binds there after
the victim is gone, and no GPU is over-committed at any step.

`run_scenario` is the whole story with its checks; the second test renders the configuration
without `preemptVerb` and shows the same checks fail, so a rendered configuration that stops
declaring the verb cannot pass unnoticed.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from audit import audit
from e2e_cluster import E2ECluster, job_pod, wait_until
from e2e_stack import shared_pool, stack

from tessera.model.contract import ANNOTATION_ALLOCATION, GPU_CORE, PRIORITY_CLASS_ONLINE, Allocation

T4_MIB = 15360
LOW = (("a60", 60), ("b30", 30), ("c30", 30))


@dataclass
class Outcome:
    problems: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    proposed: dict[str, list[str]] = field(default_factory=dict)
    urgent_node: str | None = None
    preempt_calls: int = 0


def _gpu(cluster: E2ECluster, name: str) -> str:
    pod = cluster.api.get_pod("default", name)
    return Allocation.from_json(pod["metadata"]["annotations"][ANNOTATION_ALLOCATION]).containers["main"][0].uuid


def _check_no_overcommit(cluster: E2ECluster, step: str, outcome: Outcome) -> None:
    try:
        audit(cluster.api, gpu_memory_mib=T4_MIB)
    except AssertionError as exc:
        outcome.problems.append(f"{step}: {exc}")


def run_scenario(cluster: E2ECluster) -> Outcome:
    outcome = Outcome()
    for i, (name, core) in enumerate(LOW):
        pod, _ = cluster.submit_and_run(job_pod(name, {GPU_CORE: core}))
        assert pod["spec"]["priority"] == 0
        cluster.api.set_pod_start_time("default", name, f"2024-01-01T00:00:0{i}Z")  # a60 started first
        _check_no_overcommit(cluster, f"after {name}", outcome)
    assert _gpu(cluster, "b30") == _gpu(cluster, "c30") != _gpu(cluster, "a60"), "spread: 60 % on one GPU, 30 % + 30 % on the other"
    freed = _gpu(cluster, "a60")

    urgent = job_pod("urgent", {GPU_CORE: 100})
    urgent["spec"]["priorityClassName"] = PRIORITY_CLASS_ONLINE
    cluster.create(urgent)
    first = cluster.schedule("default", "urgent")
    if first.preemption is not None:
        outcome.evicted = list(first.preemption.victims)
        outcome.proposed = dict(first.preemption.proposed)
    _check_no_overcommit(cluster, "after preemption", outcome)
    for _ in range(3):  # kube-scheduler retries; each cycle may preempt again
        attempt = cluster.schedule("default", "urgent")
        _check_no_overcommit(cluster, "after a retry", outcome)
        if attempt.node is not None:
            outcome.urgent_node = attempt.node
            break
        if attempt.preemption is not None:
            outcome.evicted += attempt.preemption.victims
    outcome.preempt_calls = cluster.scheduler.calls.count("preempt")
    if outcome.urgent_node is None:
        outcome.problems.append("the online pod is still Pending")
    else:
        views = cluster.run("default", "urgent")
        if views["main"].env.get("NVIDIA_VISIBLE_DEVICES") != freed:
            outcome.problems.append(f"the online pod sees {views['main'].env.get('NVIDIA_VISIBLE_DEVICES')}, not the freed GPU {freed}")
        _check_no_overcommit(cluster, "after the online pod started", outcome)
    if outcome.evicted != ["a60"]:
        outcome.problems.append(f"evicted {outcome.evicted}; only a60 had to go (it alone frees a GPU)")
    return outcome


def _shared_t4x2() -> Any:
    return stack(shared_pool("t4-shared", instance_type="GN7.10XLARGE160", placement="spread"))


@pytest.fixture
def cluster() -> Iterator[E2ECluster]:
    c = E2ECluster(_shared_t4x2())
    yield c
    c.close()


def _without_preempt_verb(config: dict[str, Any]) -> dict[str, Any]:
    edited = copy.deepcopy(config)
    del edited["extenders"][0]["preemptVerb"]
    return edited


@pytest.fixture
def cluster_without_preempt() -> Iterator[E2ECluster]:
    c = E2ECluster(_shared_t4x2(), scheduler_config=_without_preempt_verb)
    yield c
    c.close()


def test_online_pod_preempts_the_share_that_frees_a_whole_gpu(cluster: E2ECluster) -> None:
    assert cluster.rendered.extender_entry()["preemptVerb"] == "preempt"
    outcome = run_scenario(cluster)
    assert outcome.problems == []
    assert outcome.proposed == {"t4-shared-0": ["c30"]}, "kube-scheduler's own choice, by its node sum"
    assert outcome.preempt_calls == 1 and outcome.urgent_node == "t4-shared-0"
    assert {p["metadata"]["name"] for p in cluster.api.list_pods()} == {"b30", "c30", "urgent"}
    assert wait_until(lambda: cluster.extender.state.summary()[1] == 3)


def test_without_preempt_verb_kube_scheduler_evicts_the_wrong_share_and_the_pod_stays_pending(cluster_without_preempt: E2ECluster) -> None:
    outcome = run_scenario(cluster_without_preempt)
    assert outcome.preempt_calls == 0 and "preempt" not in cluster_without_preempt.scheduler.calls
    assert outcome.evicted == ["c30"], "kube-scheduler's node-sum victim"
    assert "the online pod is still Pending" in outcome.problems
    assert any(p.startswith("evicted ['c30']") for p in outcome.problems)
