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
from tessera.manifests.render_dir import INDEX_FILE


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
    assert [n for n in a if "/" not in n and n != INDEX_FILE] == [f"{i:02d}-{c}.yaml" for i, c in _numbered(components)]
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


def _rendered(name: str) -> set[str]:
    built = build(name)
    return set(render_files(built.config, built.path.name))


def _index(out: Path) -> list[str]:
    return [line for line in (out / INDEX_FILE).read_text().splitlines() if not line.startswith("#")]


def test_prod_then_dev_into_one_directory_leaves_no_prod_file_and_every_user_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _render(ROOT / "stacks" / "Pulumi.prod.yaml", out).returncode == 0
    prod, dev = _rendered("prod"), _rendered("dev")
    prod_only = prod - dev
    assert prod_only and {n.split("/")[0] for n in prod_only if "/" in n}, "prod must render files and a folder dev does not"
    # the user's files: beside the components, with a component-like name, and inside a release folder render empties
    mine = {"kustomization.yaml": "resources: []\n", "99-extra.yaml": "kind: Mine\n"}
    release_dir = next(n.split("/")[0] for n in sorted(prod_only) if "/" in n)
    mine[f"{release_dir}/NOTES.txt"] = "mine\n"
    for name, text in mine.items():
        (out / name).write_text(text)

    result = _render(ROOT / "stacks" / "Pulumi.dev.yaml", out)
    assert result.returncode == 0, result.stderr
    tree = _tree(out)
    assert set(tree) == dev | set(mine) | {INDEX_FILE}
    assert all(tree[name].decode() == text for name, text in mine.items())
    assert sorted(_index(out)) == sorted(dev)
    for name in prod_only:
        assert f"removed {out / name} " in result.stderr


def test_a_folder_only_prod_needs_is_removed_when_empty(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _render(ROOT / "stacks" / "Pulumi.prod.yaml", out).returncode == 0
    prod, dev = _rendered("prod"), _rendered("dev")
    folders = {n.split("/")[0] for n in prod if "/" in n} - {n.split("/")[0] for n in dev if "/" in n}
    assert folders
    result = _render(ROOT / "stacks" / "Pulumi.dev.yaml", out)
    assert result.returncode == 0, result.stderr
    assert not any((out / folder).exists() for folder in folders)
    assert all(f"removed {out / folder}/ " in result.stderr for folder in folders)


def test_a_user_file_where_render_writes_is_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    first = sorted(n for n in _rendered("local") if "/" not in n)[0]
    (out / first).write_text("kind: MyOwn\n")
    result = _render(ROOT / "stacks" / "Pulumi.local.yaml", out)
    assert result.returncode == 1
    assert result.stderr == f"{out / first}: not written by tessera render; move it away or render into another directory\n"
    assert (out / first).read_text() == "kind: MyOwn\n"
    assert sorted(p.name for p in out.iterdir()) == [first]  # nothing written


def test_a_directory_rendered_before_the_index_existed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "09-gone.yaml").write_text("# Rendered by `tessera render` from Pulumi.old.yaml: component gone. Do not edit.\nkind: Stale\n")
    (out / "09-mine.yaml").write_text("kind: Mine\n")
    result = _render(ROOT / "stacks" / "Pulumi.local.yaml", out)
    assert result.returncode == 0, result.stderr
    names = set(_tree(out))
    assert "09-gone.yaml" not in names and "09-mine.yaml" in names
    assert not any(n.startswith("gpu-operator/") for n in names)  # local has no NVIDIA pools


@pytest.mark.parametrize("entry", ["../outside.txt", "/ABS", "sub/../../outside.txt", "./x", "link/victim.txt"])
def test_a_hand_edited_index_never_deletes_outside_the_directory(tmp_path: Path, entry: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim.txt").write_text("keep\n")
    (out / "link").symlink_to(elsewhere)
    (out / INDEX_FILE).write_text(entry.replace("/ABS", str(outside)) + "\n")
    result = _render(ROOT / "stacks" / "Pulumi.local.yaml", out)
    assert result.returncode == 0, result.stderr
    assert outside.read_text() == "keep\n" and (elsewhere / "victim.txt").read_text() == "keep\n"


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
