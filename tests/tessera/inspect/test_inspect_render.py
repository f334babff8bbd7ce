"""What a person and a script see: the table (the samples in docs/operations.md included) and the JSON schema."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from inspect_fixtures import CLUSTER_DUMP, T4_MIB, gpu_pod, record, shared_node, whole_node

from tessera.cli.main import main
from tessera.model.contract import NVIDIA_GPU
from tessera.inspect import Reason, build, load_files, render_json, render_table, to_document

ROOT = Path(__file__).resolve().parents[3]
OPERATIONS = ROOT / "docs" / "operations.md"


def _doc_samples() -> list[tuple[str, str]]:
    text = OPERATIONS.read_text(encoding="utf-8")
    return re.findall(r"<!-- inspect-sample: (.*?) -->\n```text\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize(("args", "shown"), _doc_samples())
def test_the_samples_in_the_docs_are_what_the_command_prints(
    args: str, shown: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["inspect", *shlex.split(args)]) == 0
    assert capsys.readouterr().out == shown, "docs/operations.md is stale: paste the new output"


def test_docs_have_both_samples() -> None:
    assert len(_doc_samples()) == 2


def _example_table(*args: str) -> list[str]:
    return render_table(build(*_example(), source="x"), details="-d" in args).splitlines()


def _example() -> tuple[Any, Any]:
    objects = load_files([str(CLUSTER_DUMP)])
    return objects.nodes, objects.pods


def test_table_of_the_example_cluster() -> None:
    lines = _example_table()
    assert "NODE a10-1  pool a10-shared  shared (fixed-share/binpack)  Ready" in lines
    gpu_rows = [line.split() for line in lines if re.match(r"  \d  ", line)]
    assert gpu_rows == [
        ["0", "A10", "90/100", "14336/23028", "2", "healthy", "stranded"],
        ["1", "A10", "30/100", "20480/23028", "1", "healthy", "stranded"],
        ["2", "A10", "100/100", "23028/23028", "1", "healthy"],
        ["3", "A10", "100/100", "23028/23028", "1", "healthy"],
        ["0", "A10", "50/100", "10240/23028", "1", "healthy"],
        ["1", "A10", "25/100", "4096/23028", "1", "UNHEALTHY"],
    ]
    assert [line.split()[:3] for line in lines if line.startswith("ml/")] == [
        ["ml/gone", "a10-9", "node-gone"],
        ["ml/old", "a10-2", "unhealthy-gpu"],
        ["ml/stuck", "a10-2", "unbound"],
    ]
    assert "t4-1        t4-exclusive  nvidia  Ready   1     nvidia.com/gpu         1/1" in lines
    assert lines[-1] == "PENDING: 1 pod waiting for shared GPUs (-d lists them)"
    assert not any("ml/done" in line for line in lines), "a Succeeded pod holds nothing"


def test_details_list_every_container_share_and_the_pending_pods() -> None:
    plain, detailed = _example_table(), _example_table("-d")
    share_rows = [line.split() for line in detailed if line.startswith("  ") and ("bound" in line or "reserved" in line)]
    assert ["0", "ml/infer-b", "tokenizer", "20", "2048", "online", "Running", "bound"] in share_rows
    assert ["2", "ml/big", "main", "100", "23028", "-", "Running", "bound"] in share_rows
    assert ["0", "ml/stuck", "main", "50", "10240", "-", "Pending", "reserved"] in share_rows
    assert len(share_rows) == 8
    assert not any("tokenizer" in line for line in plain)
    assert detailed[-3:] == ["PENDING: 1 pod waiting for shared GPUs", "  POD         CORE %  MEMORY MiB", "  ml/waiting  50      8192"]


@pytest.mark.parametrize(
    ("nodes", "pods", "expected"),
    [
        ([], [], "No GPU nodes: no node has a tessera.dev/gpus annotation"),
        ([shared_node("s", inventory=False)], [], "  no GPU inventory (tessera.dev/gpus annotation) reported yet"),
        (
            [shared_node("s", gpus=1)],
            [gpu_pod(p, [("main", 60, 1)], node="s", allocation=record("s", {"main": [(0, 60, 1)]})) for p in ("a", "b")],
            "  0    T4     120/100  2/15360     2     healthy  overcommitted",
        ),
        ([whole_node("w", "nvidia", "p", {})], [], "w     p     nvidia  Ready   0     -         -"),
    ],
    ids=["empty cluster", "node without inventory", "overcommitted GPU", "whole-GPU node with no resources"],
)
def test_table_edge_cases(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], expected: str) -> None:
    text = render_table(build(nodes, pods, source="x"))
    assert any(line.startswith(expected) for line in text.splitlines()), text


KEYS = {
    "document": {"schemaVersion", "source", "filters", "totals", "pools", "sharedNodes", "wholeGpuNodes", "flaggedPods", "pendingPods"},
    "totals": {"gpus", "unhealthyGpus", "coreAllocated", "coreCapacity", "memoryAllocatedMiB", "memoryCapacityMiB", "pods", "strandedGpu"},
    "pool": {"name", "kind", "nodes", "pods", "totals", "resources"},
    "resource": {"name", "allocatable", "requested"},
    "sharedNode": {"name", "pool", "kind", "status", "sharingPolicy", "gpuPlacement", "problem", "totals", "gpus"},
    "gpu": {"index", "uuid", "model", "memoryMiB", "healthy", "coreAllocated", "memoryAllocatedMiB", "pods", "stranded", "overcommitted", "containers"},
    "container": {"namespace", "pod", "container", "core", "memoryMiB", "appClass", "phase", "bound"},
    "wholeGpuNode": {"name", "pool", "kind", "status", "pods", "resources"},
    "flaggedPod": {"namespace", "pod", "node", "reason", "detail"},
    "pendingPod": {"namespace", "pod", "core", "memoryMiB"},
}


def test_json_schema_is_stable() -> None:
    doc = json.loads(render_json(build(*_example(), source="file x")))
    assert set(doc) == KEYS["document"] and doc["schemaVersion"] == 1 and doc["source"] == "file x"
    assert doc["filters"] == {"nodes": [], "pools": []}
    assert set(doc["totals"]) == KEYS["totals"]
    for pool in doc["pools"]:
        assert set(pool) == KEYS["pool"] and set(pool["totals"]) == KEYS["totals"]
        assert all(set(r) == KEYS["resource"] for r in pool["resources"])
    for node in doc["sharedNodes"]:
        assert set(node) == KEYS["sharedNode"] and set(node["totals"]) == KEYS["totals"]
        for gpu in node["gpus"]:
            assert set(gpu) == KEYS["gpu"]
            assert all(set(c) == KEYS["container"] for c in gpu["containers"])
    for node in doc["wholeGpuNodes"]:
        assert set(node) == KEYS["wholeGpuNode"] and all(set(r) == KEYS["resource"] for r in node["resources"])
    assert all(set(f) == KEYS["flaggedPod"] and f["reason"] in {r.value for r in Reason} for f in doc["flaggedPods"])
    assert all(set(p) == KEYS["pendingPod"] for p in doc["pendingPods"])


def test_json_values_of_the_example_cluster() -> None:
    doc = to_document(build(*_example(), source="x"))
    a10_1 = doc["sharedNodes"][0]
    assert (a10_1["name"], a10_1["pool"], a10_1["sharingPolicy"], a10_1["gpuPlacement"], a10_1["problem"]) == (
        "a10-1", "a10-shared", "fixed-share", "binpack", None,
    )
    gpu0 = a10_1["gpus"][0]
    assert (gpu0["coreAllocated"], gpu0["memoryAllocatedMiB"], gpu0["pods"], gpu0["stranded"]) == (90, 14336, 2, True)
    assert gpu0["containers"][0] == {
        "namespace": "ml", "pod": "infer-b", "container": "server", "core": 30, "memoryMiB": 4096,
        "appClass": "online", "phase": "Running", "bound": True,
    }
    assert doc["totals"]["coreAllocated"] == 370 and doc["totals"]["coreCapacity"] == 500
    assert {p["name"]: p["resources"] for p in doc["pools"]}["t4-exclusive"] == [{"name": NVIDIA_GPU, "allocatable": 1, "requested": 1}]
    assert [(f["pod"], f["reason"], f["node"]) for f in doc["flaggedPods"]] == [
        ("gone", "node-gone", "a10-9"), ("old", "unhealthy-gpu", "a10-2"), ("stuck", "unbound", "a10-2"),
    ]
    assert doc["pendingPods"] == [{"namespace": "ml", "pod": "waiting", "core": 50, "memoryMiB": 8192}]


def test_json_nulls_for_absent_values() -> None:
    doc = to_document(build([shared_node("s", pool=None, kind=None)], [], source="x"))
    node = doc["sharedNodes"][0]
    assert (node["pool"], node["kind"], node["sharingPolicy"], node["gpuPlacement"], node["totals"]["strandedGpu"]) == (None, None, None, None, None)
    assert doc["pools"][0]["name"] is None
    assert node["totals"]["memoryCapacityMiB"] == 2 * T4_MIB
