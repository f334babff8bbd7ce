"""docs/architecture.md's picture of the deployed system is text in the repository (a Mermaid
flowchart) and must say what the code deploys: every pool kind and every component `tessera plan`
lists for the prod stack, and the workloads `tessera render` writes for the path of a shared-GPU pod.
The flowchart is also parsed here, statement by statement, so a typo that would break GitHub's
rendering (an edge to an undefined box, an unclosed subgraph, an unknown statement) fails CI."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PROD = "stacks/Pulumi.prod.yaml"

_NODE = re.compile(r'^(?P<id>[A-Za-z_][\w]*)(?P<open>\[\(|\(\[|\[)"(?P<label>[^"]+)"(?P<close>\)\]|\]\)|\])$')
_EDGE = re.compile(r'^(?P<a>[A-Za-z_]\w*) (?:-->|-\.->)(?:\|"(?P<label>[^"]+)"\|)? (?P<b>[A-Za-z_]\w*)$')
_SUBGRAPH = re.compile(r'^subgraph (?P<id>[A-Za-z_]\w*)\["(?P<label>[^"]+)"\]$')
_PAIRS = {"[": "]", "([": "])", "[(": ")]"}


def _flowchart() -> list[str]:
    blocks = re.findall(r"```mermaid\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, "docs/architecture.md holds one Mermaid picture"
    return [line.strip() for line in blocks[0].splitlines() if line.strip()]


def _parse() -> tuple[dict[str, str], dict[str, list[str]], list[tuple[str, str, str | None]]]:
    """(box id -> label, subgraph label -> box labels, edges); AssertionError on any statement
    outside the subset used here."""
    lines = _flowchart()
    assert lines[0] == "flowchart LR", lines[0]
    boxes: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    edges: list[tuple[str, str, str | None]] = []
    open_group: str | None = None
    for number, line in enumerate(lines[1:], start=2):
        if (m := _SUBGRAPH.match(line)) is not None:
            assert open_group is None, f"line {number}: subgraphs are not nested here"
            open_group = m["label"]
            groups[open_group] = []
        elif line == "end":
            assert open_group is not None, f"line {number}: end without subgraph"
            open_group = None
        elif (m := _NODE.match(line)) is not None:
            assert _PAIRS[m["open"]] == m["close"], f"line {number}: brackets do not pair: {line}"
            assert m["id"] not in boxes, f"line {number}: box {m['id']} defined twice"
            boxes[m["id"]] = m["label"]
            if open_group is not None:
                groups[open_group].append(m["label"])
        elif (m := _EDGE.match(line)) is not None:
            edges.append((m["a"], m["b"], m["label"]))
        else:
            raise AssertionError(f"line {number}: not a statement of this picture: {line!r}")
    assert open_group is None, "a subgraph is not closed"
    for a, b, _ in edges:
        assert a in boxes and b in boxes, f"edge {a} -> {b} names a box that is not defined"
    return boxes, groups, edges


def _tessera(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tessera.cli.main", *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=True)
    return result.stdout


def test_the_picture_is_a_well_formed_flowchart() -> None:
    boxes, groups, edges = _parse()
    assert len(boxes) > 10 and groups and edges


def test_every_pool_kind_runs_what_the_plan_says() -> None:
    _, groups, _ = _parse()
    plan = json.loads(_tessera("plan", PROD, "--json"))
    for pool in plan["pools"]:
        drawn = groups.get(f"pool kind {pool['kind']}")
        assert drawn is not None, f"no box for pool kind {pool['kind']}"
        missing = [c for c in pool["components"] if c not in drawn]
        assert not missing, f"pool kind {pool['kind']}: the plan runs {missing}, the picture does not show them"


def test_every_cluster_component_of_the_plan_is_drawn() -> None:
    boxes, _, _ = _parse()
    labels = " ".join(boxes.values())
    plan = json.loads(_tessera("plan", PROD, "--json"))
    for component in plan["clusterComponents"]:
        name = component.split(" (")[0]
        for part in name.split(" + "):
            assert part in labels, f"{part} (from tessera plan) is not in the picture"


def test_the_pod_path_goes_through_the_workloads_render_writes(tmp_path: Path) -> None:
    boxes, _, edges = _parse()
    _tessera("render", PROD, "-o", str(tmp_path))
    rendered = {(doc["kind"], doc["metadata"]["name"]) for f in sorted(tmp_path.glob("*.yaml")) for doc in yaml.safe_load_all(f.read_text()) if doc}
    for kind, name in [("Deployment", "tessera-scheduler"), ("Deployment", "tessera-extender"), ("Deployment", "tessera-webhook"), ("DaemonSet", "tessera-node")]:
        assert (kind, name) in rendered, (kind, name)
    numbered = sorted((int(label.split(" ")[0]), a, b) for a, b, label in edges if label and label.split(" ")[0].isdigit())
    assert [n for n, _, _ in numbered] == list(range(1, len(numbered) + 1)), "the pod's path is numbered 1..n without gaps"
    path = [boxes[box].split(":")[0].split(" x")[0] for _, a, b in numbered for box in (a, b)]
    for step in ["kube-apiserver", "tessera-webhook", "tessera-scheduler", "tessera-extender", "kubelet", "tessera-device-plugin", "tessera-node-agent"]:
        assert any(p.startswith(step) for p in path), f"the numbered path never passes {step}: {path}"
