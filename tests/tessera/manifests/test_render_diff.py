"""A sharing-policy edit is a minimal diff: the pools ConfigMap (one line of it), nothing else.

The node pool's labels change too, but they belong to the node pool component, not to the
rendered in-cluster objects. No pod template changes, so nothing restarts.
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from manifests_helpers import ROOT

from tessera.model import load_stack_file
from tessera.model.contract import POOLS_CONFIGMAP, POOLS_CONFIGMAP_KEY
from tessera.manifests.objects import KubeObject, object_id
from tessera.manifests.render import render_files
from tessera.manifests.stack import build_stack, gpu_operator_release


def _edited_stack(tmp_path: Path, stack: str, pool: str, key: str, value: Any) -> Path:
    data = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    target = next(p for p in data["config"]["tessera:nodePools"] if p["name"] == pool)
    target.setdefault("sharing", {})[key] = value
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _by_id(components: dict[str, list[KubeObject]]) -> dict[str, KubeObject]:
    return {object_id(o): o for objs in components.values() for o in objs}


def _changed_paths(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            out += _changed_paths(a.get(key), b.get(key), f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True)) for p in _changed_paths(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


EDITS = [
    # (stack, pool, key, before, after)
    ("prod", "a10-shared", "placement", "binpack", "spread"),
    ("dev", "t4-shared", "placement", "binpack", "spread"),
    ("local", "local-shared", "policy", "best-effort", "fixed-share"),
    ("prod", "a10-shared", "policy", "burst-share", "fixed-share"),
]


@pytest.mark.parametrize(("stack", "pool", "key", "before", "after"), EDITS)
def test_policy_edit_changes_only_the_pools_configmap(tmp_path: Path, stack: str, pool: str, key: str, before: str, after: str) -> None:
    base_path = _edited_stack(tmp_path / "a", stack, pool, key, before)
    edit_path = _edited_stack(tmp_path / "b", stack, pool, key, after)
    base_cfg, edit_cfg = load_stack_file(base_path), load_stack_file(edit_path)
    base, edit = _by_id(build_stack(base_cfg)), _by_id(build_stack(edit_cfg))

    assert set(base) == set(edit), "no object appears or disappears"
    changed = {oid: _changed_paths(base[oid], edit[oid]) for oid in base if base[oid] != edit[oid]}
    pools_cm = next(oid for oid in base if oid.startswith("ConfigMap/") and oid.endswith(f"/{POOLS_CONFIGMAP}"))
    assert changed == {pools_cm: [f".data.{POOLS_CONFIGMAP_KEY}"]}

    old = base[pools_cm]["data"][POOLS_CONFIGMAP_KEY]
    new = edit[pools_cm]["data"][POOLS_CONFIGMAP_KEY]
    assert json.loads(new)[pool][key] == after and json.loads(old)[pool][key] == before
    diff = [line for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0) if line[:1] in "+-"]
    assert len([d for d in diff if not d.startswith(("+++", "---"))]) == 2, "one line removed, one added"

    # the Helm release does not move either
    assert gpu_operator_release(base_cfg) == gpu_operator_release(edit_cfg)


@pytest.mark.parametrize(
    ("stack", "pool", "key", "before", "after", "changed_files"),
    [
        ("prod", "a10-shared", "placement", "binpack", "spread", ["00-platform.yaml"]),
        # existing clusters: the node labels are rendered too (nodes/label-nodes.sh), one line of it
        ("local", "local-shared", "policy", "best-effort", "fixed-share", ["00-platform.yaml", "nodes/label-nodes.sh"]),
    ],
)
def test_policy_edit_changes_the_fewest_rendered_files(
    tmp_path: Path, stack: str, pool: str, key: str, before: str, after: str, changed_files: list[str]
) -> None:
    base_path = _edited_stack(tmp_path / "a", stack, pool, key, before)
    edit_path = _edited_stack(tmp_path / "b", stack, pool, key, after)
    base = render_files(load_stack_file(base_path), f"Pulumi.{stack}.yaml")
    edit = render_files(load_stack_file(edit_path), f"Pulumi.{stack}.yaml")
    assert set(base) == set(edit)
    assert [name for name in base if base[name] != edit[name]] == changed_files
    for name in changed_files:
        removed = set(base[name].splitlines()) - set(edit[name].splitlines())
        assert len(removed) == 1, name
