"""Existing clusters get a script that gives each pool's nodes the labels and taint TKE would."""
from __future__ import annotations

import shlex
import subprocess

from manifests_helpers import build

from tessera.model.labels_taints import pool_labels
from tessera.manifests.existing_nodes import label_script


def test_tke_stacks_have_no_script() -> None:
    for name in ("dev", "prod"):
        built = build(name)
        assert label_script(built.config, "x") is None


def test_existing_stack_script_labels_and_taints_every_pool_by_its_selector() -> None:
    built = build("local")
    script = label_script(built.config, "Pulumi.local.yaml")
    assert script is not None
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid bash
    commands = [shlex.split(line) for line in script.splitlines() if line.startswith("kubectl")]
    for pool in built.config.node_pools:
        selector = ",".join(f"{k}={v}" for k, v in sorted(pool.node_selector.items()))
        label = next(c for c in commands if c[:2] == ["kubectl", "label"] and c[4] == selector)
        assert dict(arg.split("=", 1) for arg in label[6:]) == pool_labels(pool)  # type: ignore[arg-type]
        taint = next(c for c in commands if c[:2] == ["kubectl", "taint"] and c[4] == selector)
        assert taint[-1] == f"tessera.dev/gpu={pool.kind}:NoSchedule"
