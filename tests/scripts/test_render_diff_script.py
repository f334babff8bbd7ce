"""scripts/render-diff.sh in a scratch git repository holding a copy of the project's code.

The base is rendered with the base commit's own code: a renderer changed in the working tree must
show up as a difference, not be applied to both sides.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("tessera", "components", "stacks", "scripts", "requirements.txt")
POLICY_LINE = "        policy: fixed-share"


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, root / name)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    return root


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "HOME": str(repo.parent)}
    return subprocess.run(["bash", str(repo / "scripts" / "render-diff.sh"), *args], capture_output=True, text=True, env=env, cwd=repo, timeout=300, check=False)


def _restore(repo: Path) -> None:
    _git(repo, "checkout", "-q", "--", ".")
    _git(repo, "clean", "-qfd")


def test_no_change_is_exit_0_and_leaves_no_worktree(repo: Path) -> None:
    result = _run(repo, "HEAD", "dev")
    assert (result.returncode, result.stdout) == (0, "rendered manifests: no changes\n"), result.stderr
    assert _git(repo, "worktree", "list").count("\n") == 1


def test_one_line_policy_edit_in_the_working_tree(repo: Path) -> None:
    stack = repo / "stacks" / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace(POLICY_LINE, "        policy: best-effort"))
    try:
        result = _run(repo, "main", "dev", "--format", "markdown", "--title", "Rendered manifests: dev")
    finally:
        _restore(repo)
    assert result.returncode == 1, result.stderr
    assert "| `data[\"pools.json\"]/t4-shared.policy` | `\"fixed-share\"` | `\"best-effort\"` |" in result.stdout.splitlines()
    assert "1 changed, 0 added, 0 removed" in result.stdout


def test_base_is_rendered_with_the_base_commits_code(repo: Path) -> None:
    """A commit whose renderer adds an object, then a working tree without it: the object is removed."""
    render = repo / "tessera" / "manifests" / "render.py"
    original = render.read_text()
    extra = (
        '\n    files["09-extra.yaml"] = "---\\napiVersion: v1\\nkind: ConfigMap\\n'
        'metadata: {name: from-base-code, namespace: tessera-system}\\n"\n'
    )
    marker = "    return dict(sorted(files.items()))"
    render.write_text(original.replace(marker, extra + marker))
    _git(repo, "commit", "-qam", "renderer with an extra object")
    render.write_text(original)
    try:
        result = _run(repo, "HEAD", "dev")
    finally:
        _git(repo, "reset", "-q", "--hard", "HEAD~1")
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == [
        "rendered manifests: 0 changed, 0 added, 1 removed",
        "- v1 ConfigMap tessera-system/from-base-code  [09-extra.yaml]",
    ]


def test_stack_new_in_the_working_tree_is_all_added(repo: Path) -> None:
    shutil.copy(repo / "stacks" / "Pulumi.local.yaml", repo / "stacks" / "Pulumi.lab.yaml")
    try:
        result = _run(repo, "HEAD", "lab")
    finally:
        _restore(repo)
    assert result.returncode == 1
    assert "does not exist at HEAD: every object is new" in result.stderr
    assert " 0 changed, " in result.stdout and " 0 removed" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("no-such-ref", "dev"), "'no-such-ref' is not a commit"),
        (("HEAD", "nosuch"), "no stack 'nosuch'"),
        (("HEAD", "../dev"), "may only contain"),
        (("HEAD",), "usage:"),
    ],
)
def test_bad_arguments_are_exit_2(repo: Path, args: tuple[str, ...], message: str) -> None:
    result = _run(repo, *args)
    assert result.returncode == 2 and message in result.stderr
