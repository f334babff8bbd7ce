"""`tessera diff BASE HEAD` through its command line: what a reviewer reads, and the exit code.

Renders are written by hand (small, readable cases) or by `tessera render` from the real stacks
(a one-line policy edit must come out as one object with one field).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tessera.cli.main import main
from tessera.manifests.diff_report import MARKDOWN_LIMIT

ROOT = Path(__file__).resolve().parents[3]


def _cm(name: str, namespace: str = "tessera-system", **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": dict(data)}


def _deployment(image: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "tessera-extender", "namespace": "tessera-system"},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "sidecar", "image": "busybox:1.36"}, {"name": "extender", "image": image}]}}},
    }


def _write(root: Path, files: dict[str, list[dict[str, Any]] | str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else yaml.safe_dump_all(content, sort_keys=False, explicit_start=True))
    return root


def _diff(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["diff", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


BASE: dict[str, list[dict[str, Any]] | str] = {
    "00-platform.yaml": [_cm("tessera-pools", **{"pools.json": '{"t4": {"policy": "fixed-share"}}'})],
    "02-extender.yaml": [_deployment("ghcr.io/tessera-gpu/tessera:0.1.0")],
}

# (case, head files, exit code, lines the text report must contain, texts no other line may hold)
CASES: list[tuple[str, dict[str, list[dict[str, Any]] | str], int, list[str], list[str]]] = [
    ("no change", BASE, 0, ["rendered manifests: no changes"], ["~ ", "+ ", "- "]),
    (
        "added",
        {**BASE, "02-extender.yaml": [_deployment("ghcr.io/tessera-gpu/tessera:0.1.0"), _cm("extender-extra")]},
        1,
        ["rendered manifests: 0 changed, 1 added, 0 removed", "+ v1 ConfigMap tessera-system/extender-extra  [02-extender.yaml]"],
        ["~ "],
    ),
    (
        "removed",
        {"02-extender.yaml": BASE["02-extender.yaml"]},
        1,
        ["rendered manifests: 0 changed, 0 added, 1 removed", "- v1 ConfigMap tessera-system/tessera-pools  [00-platform.yaml]"],
        ["+ "],
    ),
    (
        "changed",
        {**BASE, "02-extender.yaml": [_deployment("ghcr.io/tessera-gpu/tessera:0.2.0", replicas=2)]},
        1,
        [
            "~ apps/v1 Deployment tessera-system/tessera-extender  [02-extender.yaml]",
            '    spec.replicas: 1 -> 2',
            '    spec.template.spec.containers[name=extender].image: "ghcr.io/tessera-gpu/tessera:0.1.0" -> "ghcr.io/tessera-gpu/tessera:0.2.0"',
        ],
        ["sidecar"],
    ),
    (
        "moved between files",
        {"00-platform.yaml": [], "02-extender.yaml": [*BASE["02-extender.yaml"], *BASE["00-platform.yaml"]]},  # type: ignore[misc]
        1,
        ["rendered manifests: 1 changed, 0 added, 0 removed", "~ v1 ConfigMap tessera-system/tessera-pools  [00-platform.yaml -> 02-extender.yaml] (moved)"],
        ["+ ", "- "],
    ),
    (
        "embedded JSON field",
        {**BASE, "00-platform.yaml": [_cm("tessera-pools", **{"pools.json": '{"t4": {"policy": "best-effort"}}'})]},
        1,
        ['    data["pools.json"]/t4.policy: "fixed-share" -> "best-effort"'],
        [],
    ),
    (
        "field removed and added",
        {**BASE, "00-platform.yaml": [_cm("tessera-pools", other="1")]},
        1,
        ['    data["pools.json"]: "{\\"t4\\": {\\"policy\\": \\"fixed-share\\"}}" -> (absent)', '    data.other: (absent) -> "1"'],
        [],
    ),
]


@pytest.mark.parametrize(("case", "head", "code", "present", "absent"), CASES, ids=[c[0] for c in CASES])
def test_text_report_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, head: dict[str, Any], code: int, present: list[str], absent: list[str]) -> None:
    base_dir, head_dir = _write(tmp_path / "base", BASE), _write(tmp_path / "head", head)
    got, out, err = _diff(capsys, base_dir, head_dir)
    assert (got, err) == (code, "")
    lines = out.splitlines()
    for line in present:
        assert line in lines, out
    for text in absent:
        assert not any(text in line for line in lines if line not in present), out


def _edit_line(stack: str, old: str, new: str, tmp_path: Path) -> tuple[Path, Path]:
    text = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    assert text.count(old) == 1, f"{old!r} must be one line of the {stack} stack"
    base, head = tmp_path / "base" / f"Pulumi.{stack}.yaml", tmp_path / "head" / f"Pulumi.{stack}.yaml"
    for path, content in ((base, text), (head, text.replace(old, new))):
        path.parent.mkdir(parents=True)
        path.write_text(content)
    return base, head


POLICY_EDITS = [
    ("dev", "        policy: fixed-share", "        policy: best-effort", 't4-shared.policy: "fixed-share" -> "best-effort"'),
    ("dev", "        placement: binpack", "        placement: spread", 't4-shared.placement: "binpack" -> "spread"'),
    ("prod", "        policy: burst-share", "        policy: fixed-share", 'a10-shared.policy: "burst-share" -> "fixed-share"'),
    ("prod", "        placement: binpack", "        placement: spread", 'a10-shared.placement: "binpack" -> "spread"'),
]


@pytest.mark.parametrize(("stack", "old", "new", "field"), POLICY_EDITS, ids=[f"{e[0]}-{e[2].split()[0]}" for e in POLICY_EDITS])
def test_one_line_policy_edit_is_one_object_one_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], stack: str, old: str, new: str, field: str) -> None:
    base, head = _edit_line(stack, old, new, tmp_path)
    code, out, err = _diff(capsys, base, head)
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        "rendered manifests: 1 changed, 0 added, 0 removed",
        "~ v1 ConfigMap tessera-system/tessera-pools  [00-platform.yaml]",
        f'    data["pools.json"]/{field}',
    ]


def test_policy_edit_on_an_existing_cluster_also_relabels_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """provider: existing renders the pools' node labels as a script: the edit shows there too."""
    base, head = _edit_line("local", "        policy: best-effort", "        policy: fixed-share", tmp_path)
    code, out, _ = _diff(capsys, base, head)
    lines = out.splitlines()
    assert code == 1 and lines[0] == "rendered manifests: 2 changed, 0 added, 0 removed"
    assert lines[1:3] == ["~ v1 ConfigMap tessera-system/tessera-pools  [00-platform.yaml]", '    data["pools.json"]/local-shared.policy: "best-effort" -> "fixed-share"']
    assert lines[3] == "~ nodes/label-nodes.sh"
    changed = [line.strip() for line in lines[5:]]
    assert len(changed) == 2 and all("tessera.dev/sharing-policy=" in line for line in changed)
    assert changed[0].startswith("-") and changed[0].endswith("sharing-policy=best-effort") and changed[1].endswith("sharing-policy=fixed-share")


def test_render_directory_and_its_stack_file_are_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = ROOT / "stacks" / "Pulumi.prod.yaml"
    assert main(["render", str(stack), "-o", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    (tmp_path / "out" / "README.md").write_text("not ours: ignored\n")
    assert _diff(capsys, tmp_path / "out", stack) == (0, "rendered manifests: no changes\n", "")


def test_new_stack_against_an_empty_directory_is_all_added(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    code, out, _ = _diff(capsys, tmp_path / "empty", ROOT / "stacks" / "Pulumi.local.yaml")
    assert code == 1
    assert out.splitlines()[0].startswith("rendered manifests: 0 changed, ") and " 0 removed" in out
    assert "+ nodes/label-nodes.sh" in out.splitlines()


def test_secret_values_are_never_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def secret(value: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls", "namespace": "t"}, "type": "Opaque", "data": {"tls.key": value}}

    base = _write(tmp_path / "base", {"05-webhook.yaml": [secret("c2VjcmV0LW9uZQ==")]})
    head = _write(tmp_path / "head", {"05-webhook.yaml": [secret("c2VjcmV0LXR3bw==")]})
    for fmt in ("text", "markdown"):
        code, out, _ = _diff(capsys, base, head, "--format", fmt)
        assert code == 1
        assert "c2VjcmV0" not in out and 'data["tls.key"]' in out and "(secret, not shown)" in out


def test_markdown_report_for_a_pr_comment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = {**BASE, "02-extender.yaml": [_deployment("ghcr.io/tessera-gpu/tessera:0.2.0"), _cm("a|b", x="`tick`")]}
    code, out, _ = _diff(capsys, _write(tmp_path / "b", BASE), _write(tmp_path / "h", head), "--format", "markdown", "--title", "Rendered manifests: prod")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "### Rendered manifests: prod"
    assert "1 changed, 1 added, 0 removed (objects keyed by apiVersion/kind/namespace/name)." in lines
    assert "| `spec.template.spec.containers[name=extender].image` | `\"ghcr.io/tessera-gpu/tessera:0.1.0\"` | `\"ghcr.io/tessera-gpu/tessera:0.2.0\"` |" in lines
    assert "- `v1 ConfigMap tessera-system/a\\|b` in `02-extender.yaml`" in lines  # a pipe cannot break the table


def test_markdown_stays_under_the_comment_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    many = [_cm(f"cm-{i:04d}", value="x" * 150) for i in range(1500)]
    _write(tmp_path / "empty", {})
    code, out, _ = _diff(capsys, tmp_path / "empty", _write(tmp_path / "h", {"00-platform.yaml": many}), "--format", "markdown")
    assert code == 1 and len(out) <= MARKDOWN_LIMIT
    assert "more objects not shown (comment size limit)" in out


def test_text_files_show_their_changed_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = "#!/usr/bin/env bash\nset -euo pipefail\nkubectl label nodes -l pool=a x=1\n"
    base = _write(tmp_path / "b", {"nodes/label-nodes.sh": script})
    head = _write(tmp_path / "h", {"nodes/label-nodes.sh": script.replace("x=1", "x=2")})
    code, out, _ = _diff(capsys, base, head)
    assert code == 1
    assert out.splitlines()[1:] == [
        "~ nodes/label-nodes.sh",
        "    (file): <text: 3 lines, sha256 " + out.split("sha256 ")[1][:8] + "> -> <text: 3 lines, sha256 " + out.split("sha256 ")[2][:8] + ">",
        "        -kubectl label nodes -l pool=a x=1",
        "        +kubectl label nodes -l pool=a x=2",
    ]


ERRORS = [
    ("missing side", lambda t: (t / "nope", t / "b"), "nope: no such file or directory"),
    ("bad yaml", lambda t: (_write(t / "a", {"00-platform.yaml": "a: [1,\n"}), t / "b"), "00-platform.yaml:2: not valid YAML"),
    ("invalid stack file", lambda t: (_write(t / "a", {"Pulumi.x.yaml": "config:\n  tessera:bogus: 1\n"}) / "Pulumi.x.yaml", t / "b"), "Pulumi.x.yaml: bogus:"),
    ("object twice", lambda t: (_write(t / "a", {"00-platform.yaml": [_cm("x")], "01-nvidia.yaml": [_cm("x")]}), t / "b"), "01-nvidia.yaml: v1 ConfigMap tessera-system/x is also in 00-platform.yaml"),
]


@pytest.mark.parametrize(("case", "sides", "message"), ERRORS, ids=[e[0] for e in ERRORS])
def test_unreadable_input_is_exit_2_with_where(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, sides: Any, message: str) -> None:
    _write(tmp_path / "b", BASE)
    base, head = sides(tmp_path)
    code, out, err = _diff(capsys, base, head)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_exit_codes_through_a_real_process(tmp_path: Path) -> None:
    base = _write(tmp_path / "b", BASE)
    run = [sys.executable, "-m", "tessera.cli.main", "diff", str(base)]
    same = subprocess.run([*run, str(base)], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    changed = subprocess.run([*run, str(_write(tmp_path / "h", {}))], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert (same.returncode, changed.returncode) == (0, 1)
    assert "2 removed" in changed.stdout


# the example in docs/operations.md: two one-line edits of the dev stack
DOC_EDITS = [
    ("        policy: fixed-share\n", "        policy: best-effort\n"),
    ("    - {namespace: team-a, gpuCore: 200, gpuMemoryMiB: 16384}\n", "    - {namespace: team-a, gpuCore: 200, gpuMemoryMiB: 16384}\n    - {namespace: team-b, gpuCore: 100}\n"),
]


def test_operations_doc_shows_the_real_pr_comment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text()
    head = text
    for old, new in DOC_EDITS:
        assert head.count(old) == 1, old
        head = head.replace(old, new)
    (tmp_path / "base").mkdir()
    (tmp_path / "head").mkdir()
    (tmp_path / "base" / "Pulumi.dev.yaml").write_text(text)
    (tmp_path / "head" / "Pulumi.dev.yaml").write_text(head)
    code, out, _ = _diff(capsys, tmp_path / "base" / "Pulumi.dev.yaml", tmp_path / "head" / "Pulumi.dev.yaml", "--format", "markdown", "--title", "Rendered manifests: dev")
    assert code == 1
    doc = (ROOT / "docs" / "operations.md").read_text()
    start = doc.index("<!-- diff-sample: dev -->\n```markdown\n") + len("<!-- diff-sample: dev -->\n```markdown\n")
    shown = doc[start : doc.index("```\n<!-- /diff-sample -->", start)]
    assert shown == out, "docs/operations.md's example comment is stale: paste the output of this test's command"
