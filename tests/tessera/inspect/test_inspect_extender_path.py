"""Pods placed by the real extender (over HTTP, driven like kube-scheduler), then `tessera inspect --from`
a dump of the API server: inspect shows per GPU exactly what the extender's own cache holds."""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "scheduler"))

from extender_harness import GIB, Harness, node_manifest, pod_manifest, wait_until  # noqa: E402
from inspect_fixtures import dump_api  # noqa: E402

from tessera.alloc import MILLI_PER_CORE  # noqa: E402
from tessera.cli.main import main  # noqa: E402
from tessera.model.contract import LABEL_POOL  # noqa: E402
from tessera.kube.fake import FakeKubeApi  # noqa: E402

PODS: list[tuple[str, tuple[tuple[str, int, int | None], ...]]] = [
    ("s40", (("main", 40, 5 * GIB),)),
    ("s30", (("main", 30, 3 * GIB),)),
    ("duo", (("a", 20, 1 * GIB), ("b", 20, 1 * GIB))),
    ("whole2", (("main", 200, None),)),
    ("tiny", (("main", 5, None),)),
    ("s50", (("main", 50, 2 * GIB),)),
]


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness(FakeKubeApi())
    yield h
    h.close()


def test_inspect_shows_what_the_extender_holds(harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    api = harness.api
    api.create_node(node_manifest("gpu-a", gpus=2, placement="binpack", labels={LABEL_POOL: "t4-shared"}))
    api.create_node(node_manifest("gpu-b", gpus=2, placement="binpack", labels={LABEL_POOL: "t4-shared"}))
    service = harness.start()
    scheduler = harness.scheduler(service)
    for name, containers in PODS:
        api.create_pod(pod_manifest(name, *containers))
        assert scheduler.schedule("default", name).node, name
    finished = api.set_pod_phase("default", "s30", "Succeeded")  # frees its share
    assert wait_until(lambda: service.state.holding(finished["metadata"]["uid"]) is None)

    assert main(["inspect", "--from", str(dump_api(api, tmp_path / "dump.json")), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)

    shown = {(n["name"], g["index"]): (g["coreAllocated"], g["memoryAllocatedMiB"]) for n in doc["sharedNodes"] for g in n["gpus"]}
    with service.state.lock:
        held = {
            (name, g.index): (g.used_milli // MILLI_PER_CORE, g.used_memory_mib)
            for name, node in service.state.cluster.nodes.items()
            for g in node.gpus
        }
        pods_per_node = {name: sum(1 for p in service.state.cluster.allocated().values() if p.node == name) for name in {node for node, _ in held}}
    assert shown == held
    assert sum(core for core, _ in shown.values()) == 40 + 2 * 20 + 200 + 5 + 50
    assert {n["name"]: n["totals"]["pods"] for n in doc["sharedNodes"]} == pods_per_node
    assert doc["flaggedPods"] == [] and doc["pendingPods"] == []
    (pool,) = doc["pools"]
    assert (pool["name"], pool["nodes"], pool["pods"], pool["totals"]["coreCapacity"]) == ("t4-shared", 2, 5, 400)
    listed = sorted((c["pod"], c["container"]) for n in doc["sharedNodes"] for g in n["gpus"] for c in g["containers"])
    assert listed == sorted(
        [("s40", "main"), ("duo", "a"), ("duo", "b"), ("whole2", "main"), ("whole2", "main"), ("tiny", "main"), ("s50", "main")]
    )
