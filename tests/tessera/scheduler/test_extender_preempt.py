"""/preempt over HTTP: the victims kube-scheduler proposes are replaced by ones that free a GPU.

Bodies are what kube-scheduler sends (`kube_scheduler_preemption.py` cites the source): with
nodeCacheCapable, `NodeNameToMetaVictims` of UIDs and `NodeNameToVictims: null`; without it,
whole pods in `NodeNameToVictims`. The reply is always `NodeNameToMetaVictims`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from extender_harness import Harness, node_manifest, pod_manifest, rendered_scheduler_config, wait_until
from kube_scheduler_emulator import ConfigError, ExtenderEntry

from tessera.model.contract import ANNOTATION_ALLOCATION, Allocation
from tessera.kube.api import KubeObject
from tessera.scheduler.service import ExtenderService


def _pod(harness: Harness, name: str, core: int, priority: int, *, started: str | None = None) -> KubeObject:
    manifest = pod_manifest(name, ("main", core, None))
    manifest["spec"]["priority"] = priority
    pod = harness.api.create_pod(manifest)
    if started:
        pod = harness.api.set_pod_start_time("default", name, started)
    return pod


def _gpu(harness: Harness, name: str) -> int:
    record = Allocation.from_json(harness.api.get_pod("default", name)["metadata"]["annotations"][ANNOTATION_ALLOCATION])
    return record.containers["main"][0].index


def _meta(node: str, uids: list[str], violations: int = 0) -> dict[str, Any]:
    return {node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": violations}}


@dataclass
class Binpacked:
    service: ExtenderService
    pods: dict[str, KubeObject]

    def uid(self, name: str) -> str:
        return str(self.pods[name]["metadata"]["uid"])


@pytest.fixture
def binpacked(harness: Harness) -> Binpacked:
    """n1, 2 GPUs, binpack: a60 + b30 on one GPU, c70 on the other, all of priority 0; a started first."""
    harness.api.create_node(node_manifest("n1", gpus=2, placement="binpack"))
    service = harness.start()
    scheduler = harness.scheduler(service)
    pods = {}
    for i, (name, core) in enumerate((("a60", 60), ("b30", 30), ("c70", 70))):
        _pod(harness, name, core, 0)
        assert scheduler.schedule("default", name).node == "n1"
        pods[name] = harness.api.set_pod_start_time("default", name, f"2024-01-01T00:00:0{i}Z")
    assert _gpu(harness, "a60") == _gpu(harness, "b30") != _gpu(harness, "c70")
    return Binpacked(service, pods)


def test_preempt_answers_with_victims_that_free_one_gpu(harness: Harness, binpacked: Binpacked) -> None:
    service = binpacked.service
    client = harness.client(service)
    uid = {name: binpacked.uid(name) for name in binpacked.pods}
    before = [(g.used_milli, g.used_memory_mib) for g in service.state.cluster.nodes["n1"].gpus]
    preemptor = _pod(harness, "urgent", 50, 1000)
    # kube-scheduler's node sum: evicting b30 leaves 130 of 200 % used, so 50 % "fits"; per GPU
    # nothing does (60 % stays on one GPU, 70 % on the other)
    body = {"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": {**_meta("n1", [uid["b30"]]), **_meta("ghost", ["x"])}}
    status, result = client.post("preempt", body)
    assert status == 200
    # c70 alone frees a GPU; so would a60, but it started first (kube-scheduler keeps older pods).
    # c70 was not in kube-scheduler's set, so its PodDisruptionBudget is unknown: counted as one
    assert result == {"NodeNameToMetaVictims": _meta("n1", [uid["c70"]], 1)}
    assert [(g.used_milli, g.used_memory_mib) for g in service.state.cluster.nodes["n1"].gpus] == before


def test_victims_are_only_pods_of_lower_priority(harness: Harness, binpacked: Binpacked) -> None:
    client = harness.client(binpacked.service)
    uid = {name: binpacked.uid(name) for name in binpacked.pods}
    equal = _pod(harness, "equal", 50, 0)  # same priority as every pod there: nobody may go
    status, result = client.post("preempt", {"Pod": equal, "NodeNameToVictims": None, "NodeNameToMetaVictims": _meta("n1", [uid["c70"]])})
    assert (status, result) == (200, {"NodeNameToMetaVictims": {}})


def test_kube_schedulers_set_is_kept_when_it_already_frees_a_gpu(harness: Harness, binpacked: Binpacked) -> None:
    client = harness.client(binpacked.service)
    uid = {name: binpacked.uid(name) for name in binpacked.pods}
    urgent = _pod(harness, "urgent", 50, 1000)
    body = {"Pod": urgent, "NodeNameToVictims": None, "NodeNameToMetaVictims": _meta("n1", [uid["c70"]], 0)}
    status, result = client.post("preempt", body)
    assert (status, result) == (200, {"NodeNameToMetaVictims": _meta("n1", [uid["c70"]], 0)})


def test_whole_pods_are_read_when_not_node_cache_capable(harness: Harness, binpacked: Binpacked) -> None:
    client = harness.client(binpacked.service)
    urgent = _pod(harness, "urgent", 100, 1000)  # a whole GPU: both pods of one GPU, or c70
    body = {"Pod": urgent, "NodeNameToVictims": {"n1": {"Pods": [binpacked.pods["b30"]], "NumPDBViolations": 0}}, "NodeNameToMetaVictims": None}
    status, result = client.post("preempt", body)
    assert (status, result) == (200, {"NodeNameToMetaVictims": _meta("n1", [binpacked.uid("c70")], 1)})


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "Pod: is required"),
        ({"Pod": "urgent"}, "Pod: must be an object"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"n1": {"Pods": [{}]}}}, "UID"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": 7}]}}}, "UID"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "a"}, {"UID": "a"}]}}}, "listed twice"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"n1": {"Pods": "a"}}}, "Pods: must be an array"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"n1": {"NumPDBViolations": -1}}}, "non-negative integer"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"n1": {"NumPDBViolations": "2"}}}, "non-negative integer"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"n1": {"NumPDBViolations": True}}}, "non-negative integer"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"n1": None}}, "must be a JSON object"),
        ({"Pod": {"metadata": {}}, "NodeNameToMetaVictims": ["n1"]}, "must be a JSON object"),
        ({"Pod": {"metadata": {}}, "NodeNameToVictims": {"n1": {"Pods": [{"spec": {}}]}}}, "metadata: is required (an object)"),
        ({"Pod": {"metadata": {}}, "NodeNameToVictims": {}, "NodeNameToMetaVictims": {}}, "not both"),
    ],
)
def test_malformed_preemption_args_get_400_with_a_reason(harness: Harness, body: dict[str, Any], fragment: str) -> None:
    harness.api.create_node(node_manifest("n1"))
    service = harness.start()
    client = harness.client(service)
    status, raw = client.post_raw("/preempt", json.dumps(body).encode())
    assert status == 400, raw
    assert fragment in json.loads(raw)["error"]
    pod = _pod(harness, "ok", 10, 5)
    status, result = client.post("preempt", {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": {}})
    assert (status, result) == (200, {"NodeNameToMetaVictims": {}}), "the server keeps serving"


# --- the emulator calls only what the configuration declares ------------------------------------
def _without(verb: str) -> str:
    config = yaml.safe_load(rendered_scheduler_config())
    del config["extenders"][0][verb]
    return yaml.safe_dump(config)


@pytest.mark.parametrize("field", ["filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb"])
def test_the_emulator_never_calls_a_verb_the_configuration_leaves_out(harness: Harness, field: str) -> None:
    harness.api.create_node(node_manifest("n1", gpus=1))
    harness.api.create_node(node_manifest("n2", gpus=1))
    service = harness.start()
    scheduler = harness.scheduler(service, config=_without(field))
    verb = yaml.safe_load(rendered_scheduler_config())["extenders"][0][field]
    for name in ("low-1", "low-2"):
        _pod(harness, name, 60, 0)
        scheduler.schedule("default", name)
    _pod(harness, "urgent", 60, 1000)
    scheduler.schedule("default", "urgent")  # no room: preemption
    assert verb not in scheduler.calls
    assert set(scheduler.calls) == {"filter", "prioritize", "bind", "preempt"} - {verb}
    if field == "bindVerb":  # kube-scheduler bound the pods itself: no allocation record, the node refuses them
        assert all(ANNOTATION_ALLOCATION not in (p["metadata"].get("annotations") or {}) for p in harness.api.list_pods() if p["spec"].get("nodeName"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda e: e.update(weight=0), "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it"),
        (lambda e: e.update(preemptVerbs="preempt"), 'unknown field "extenders[0].preemptVerbs"'),
        (lambda e: e.update(httpTimeout="5 seconds"), "invalid duration"),
    ],
)
def test_the_emulator_refuses_a_configuration_kube_scheduler_refuses(edit: Any, message: str) -> None:
    config = yaml.safe_load(rendered_scheduler_config())
    edit(config["extenders"][0])
    with pytest.raises(ConfigError, match=re.escape(message)):
        ExtenderEntry.from_config(config)


def test_the_emulator_reads_the_rendered_configuration() -> None:
    entry = ExtenderEntry.from_config(rendered_scheduler_config())
    assert (entry.filter_verb, entry.prioritize_verb, entry.bind_verb, entry.preempt_verb) == ("filter", "prioritize", "bind", "preempt")
    assert entry.node_cache_capable and not entry.ignorable and entry.supports_preemption
    assert entry.url_path("preempt") == "/preempt" and entry.http_timeout_s == 5.0


def test_after_preemption_the_pod_binds_on_the_freed_gpu(harness: Harness) -> None:
    """kube-scheduler with the rendered configuration: node-sum preemption, corrected by /preempt."""
    harness.api.create_node(node_manifest("n1", gpus=2, placement="spread"))
    service = harness.start()
    scheduler = harness.scheduler(service)
    for i, (name, core) in enumerate((("a60", 60), ("b30", 30), ("c30", 30))):
        _pod(harness, name, core, 0)
        assert scheduler.schedule("default", name).node == "n1"
        harness.api.set_pod_start_time("default", name, f"2024-01-01T00:00:0{i}Z")
    assert _gpu(harness, "b30") == _gpu(harness, "c30") != _gpu(harness, "a60")
    freed = _gpu(harness, "a60")
    uid_a = harness.api.get_pod("default", "a60")["metadata"]["uid"]
    _pod(harness, "urgent", 100, 1000)
    attempt = scheduler.schedule("default", "urgent")
    assert attempt.preemption is not None
    # kube-scheduler's own choice: reprieve a60, then b30 (started earlier); c30 must go by the node sum
    assert attempt.preemption.proposed == {"n1": ["c30"]}
    assert attempt.preemption.victims == ["a60"] and attempt.preemption.nominated == "n1"
    assert "preempt" in scheduler.calls
    assert wait_until(lambda: service.state.holding(uid_a) is None)
    assert scheduler.schedule("default", "urgent").node == "n1"
    assert _gpu(harness, "urgent") == freed
    assert {p["metadata"]["name"] for p in harness.api.list_pods()} == {"b30", "c30", "urgent"}
