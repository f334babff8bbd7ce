"""`tessera render` through its real interface (a subprocess): files, determinism, errors."""
from __future__ import annotations

import os
from collections.abc import Mapping
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from manifests_helpers import ROOT, STACK_NAMES, build

from tessera.manifests.render import render_files


def _render(stack_file: Path, out: Path, hash_seed: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run(
        [sys.executable, "-m", "tessera.cli.main", "render", str(stack_file), "-o", str(out)],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT, check=False,
    )


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_prod_renders_identical_bytes_twice_whatever_the_hash_seed(tmp_path: Path) -> None:
    stack_file = ROOT / "stacks" / "Pulumi.prod.yaml"
    first, second = _render(stack_file, tmp_path / "a", "1"), _render(stack_file, tmp_path / "b", "2")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert a == b
    # one file per component in apply order, and the gpu-operator release beside them
    components = build("prod").components
    assert [n for n in a if "/" not in n] == [f"{i:02d}-{c}.yaml" for i, c in _numbered(components)]
    assert {"gpu-operator/values.yaml", "gpu-operator/release.yaml", "prometheus-adapter/values.yaml", "prometheus-adapter/release.yaml"} <= set(a)


def _numbered(components: Mapping[str, object]) -> list[tuple[int, str]]:
    from tessera.manifests.stack import COMPONENT_ORDER

    return [(COMPONENT_ORDER.index(c), c) for c in components]


@pytest.mark.parametrize("name", STACK_NAMES)
def test_rendered_files_hold_exactly_the_built_objects(name: str) -> None:
    built = build(name)
    files = render_files(built.config, built.path.name)
    assert files == render_files(built.config, built.path.name)
    for component, objects in built.components.items():
        text = next(t for f, t in files.items() if f.endswith(f"-{component}.yaml"))
        assert list(yaml.safe_load_all(text)) == objects


def test_stale_component_files_are_removed_and_other_files_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "09-gone.yaml").write_text("kind: Stale\n")
    (out / "kustomization.yaml").write_text("resources: []\n")
    result = _render(ROOT / "stacks" / "Pulumi.local.yaml", out)
    assert result.returncode == 0, result.stderr
    names = set(_tree(out))
    assert "09-gone.yaml" not in names
    assert "kustomization.yaml" in names
    assert not any(n.startswith("gpu-operator/") for n in names)  # local has no NVIDIA pools


def test_invalid_stack_exits_2_with_one_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    text = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text().replace("policy: fixed-share", "policy: fair-share")
    bad.write_text(text)
    result = _render(bad, tmp_path / "out")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith(f"{bad}: ") for line in lines)
    assert any("sharing.policy" in line for line in lines)
    assert not (tmp_path / "out").exists()


def test_missing_stack_file_exits_2(tmp_path: Path) -> None:
    result = _render(tmp_path / "nope.yaml", tmp_path / "out")
    assert result.returncode == 2 and "no such file" in result.stderr and "Traceback" not in result.stderr


def test_release_files_of_a_release_the_stack_dropped_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _render(ROOT / "stacks" / "Pulumi.prod.yaml", out).returncode == 0
    assert (out / "prometheus-adapter" / "values.yaml").is_file()
    (out / "prometheus-adapter" / "NOTES.txt").write_text("mine\n")
    # dev asks for no prometheus-adapter: its rendered files go, files render did not write stay
    result = _render(ROOT / "stacks" / "Pulumi.dev.yaml", out)
    assert result.returncode == 0, result.stderr
    names = set(_tree(out))
    assert not {"prometheus-adapter/values.yaml", "prometheus-adapter/release.yaml"} & names
    assert "prometheus-adapter/NOTES.txt" in names
