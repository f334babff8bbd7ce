"""The checkpoint: every prepared claim survives a restart, also a SIGKILL at any moment, and a
damaged checkpoint is a clear error, never an empty set."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from dra_harness import NODE, DraNode, Grant

from tessera.model.contract import GpuShare
from tessera_node.dra.checkpoint import Checkpoint, CheckpointCorrupt
from tessera_node.dra.core import ClaimRef, PreparedClaim, PreparedDevice
from tessera_node.registry import ContainerName, PodUid, RegisteredContainer

HERE = Path(__file__).parent


def _claim(uid: str) -> PreparedClaim:
    share = GpuShare(0, "GPU-a", 30, 1024)
    record = RegisteredContainer(PodUid("pod-" + uid), "default", "p", ContainerName("main"), (share,))
    return PreparedClaim(ClaimRef("default", "c-" + uid, uid), (PreparedDevice("gpu", NODE, "gpu-0", share, "s1"),), f"tessera.dev/gpu={uid}", (record,))


def test_the_checkpoint_round_trips(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path)
    assert checkpoint.load() == []
    claims = [_claim("b"), _claim("a")]
    checkpoint.save(claims)
    assert checkpoint.load() == sorted(claims, key=lambda c: c.claim.uid)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda text: text[: len(text) // 2], "cannot be read"),
        (lambda text: text.replace('"c-a"', '"c-x"'), "checksum mismatch"),
        (lambda text: json.dumps({"v": 9, "claims": []}), "not a version 1 checkpoint"),
    ],
)
def test_a_damaged_checkpoint_is_an_error_naming_the_file(tmp_path: Path, damage, reason: str) -> None:  # type: ignore[no-untyped-def]
    checkpoint = Checkpoint(tmp_path)
    checkpoint.save([_claim("a")])
    checkpoint.path.write_text(damage(checkpoint.path.read_text()))
    with pytest.raises(CheckpointCorrupt, match=reason) as info:
        checkpoint.load()
    assert str(checkpoint.path) in str(info.value)


def test_a_restarted_plugin_keeps_every_prepared_claim(node: DraNode) -> None:
    claims = [node.claim(f"c{i}", [Grant(NODE, i % 2, 20, 512)], pod=f"p{i}") for i in range(3)]
    before = {c[2]: node.prepare(c)[c[2]] for c in claims}
    node.stop_plugin()
    for claim in claims:  # the API server no longer has them: only the checkpoint can answer
        node.kube.delete_resource_claim("default", claim[1])
    node.registry.replace_all([])  # e.g. a lost registry: restored from the checkpoint
    node.start_plugin()
    node.kubelet.wait_registered()
    assert len(node.registry.all()) == 3
    for claim in claims:
        assert node.prepare(claim)[claim[2]] == before[claim[2]]
    assert node.kubelet.node_unprepare(claims) == {c[2]: "" for c in claims}
    assert node.cdi_files() == [] and node.registry.all() == []


def test_prepared_claims_survive_sigkill_of_the_plugin_process() -> None:
    root = Path(tempfile.mkdtemp(prefix="drak", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    child = subprocess.Popen([sys.executable, str(HERE / "dra_child.py"), str(root), "200"], stdout=subprocess.PIPE, text=True, env=env)
    answered: list[str] = []
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "serving"
        deadline = time.monotonic() + 60
        while len(answered) < 8 and time.monotonic() < deadline:
            line = child.stdout.readline().split()
            if line and line[0] == "prepared":
                answered.append(line[1])
        child.send_signal(signal.SIGKILL)  # in the middle of further prepares
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert len(answered) >= 8
    node = DraNode(root=root)
    try:
        plugin = node.start_plugin()
        kept = {c.claim.uid for c in plugin.prepared_claims()}
        assert set(answered) <= kept, "every claim kubelet got an answer for is in the checkpoint"
        assert {c.removeprefix("tessera.dev-gpu_").removesuffix(".json") for c in node.cdi_files()} >= kept
        registered = {r.key for r in node.registry.all()}
        assert all(r.key in registered for c in plugin.prepared_claims() for r in c.containers)
        node.start_kubelet()
        claims = [("default", c.claim.name, c.claim.uid) for c in plugin.prepared_claims()]
        assert node.prepare(*claims)  # answered from the checkpoint: the new API server has none of them
        assert set(node.kubelet.node_unprepare(claims).values()) == {""}
        assert plugin.prepared_claims() == [] and node.registry.all() == []
    finally:
        node.close()
