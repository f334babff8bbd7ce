"""`tessera images lock|pin|policy-config`: what the release workflow runs, with a stand-in registry tool.

The stand-in `crane` answers `crane digest REF` from a table, as the real one prints a digest for a
ref it can resolve and fails with a message for one it cannot.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tessera.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "policies"))  # the pack's rules, as tests/policies imports them
from tessera_policies.rules import PolicySettings, check_images_pinned  # noqa: E402

RELEASED = "ghcr.io/acme/tessera:0.2.0"
TRITON = "nvcr.io/nvidia/tritonserver:24.08-py3"  # prod's tessera:workloads[0].image


def _digest(ref: str) -> str:
    return "sha256:" + hashlib.sha256(ref.encode()).hexdigest()


@pytest.fixture()
def crane(tmp_path: Path) -> Path:
    """`crane digest REF`: the sha256 of the ref's text, or a failure for refs named in ./missing."""
    script = tmp_path / "crane"
    missing = tmp_path / "missing"
    missing.write_text("")
    script.write_text(
        f"#!{sys.executable}\n"
        "import hashlib, sys\n"
        f"if sys.argv[1:2] != ['digest'] or sys.argv[2] in open({str(missing)!r}).read().split():\n"
        "    sys.exit(f'Error: fetching manifest {sys.argv[-1]}: MANIFEST_UNKNOWN')\n"
        f"fixed = open({str(tmp_path / 'fixed')!r}).read().strip() if __import__('os').path.exists({str(tmp_path / 'fixed')!r}) else ''\n"
        "print(fixed or 'sha256:' + hashlib.sha256(sys.argv[2].encode()).hexdigest())\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture()
def stacks(tmp_path: Path) -> Path:
    directory = tmp_path / "stacks"
    shutil.copytree(ROOT / "stacks", directory, ignore=shutil.ignore_patterns("images.lock.json"))
    return directory


def _run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["images", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def _lock(capsys: pytest.CaptureFixture[str], crane: Path, stacks: Path) -> tuple[int, str, str]:
    return _run(capsys, "lock", stacks, "--tessera", RELEASED, "--release", "v0.2.0", "--resolve-command", f"{crane} digest", "-o", stacks / "images.lock.json")


def test_lock_resolves_our_image_and_every_upstream_image_once(capsys: pytest.CaptureFixture[str], crane: Path, stacks: Path) -> None:
    code, out, err = _lock(capsys, crane, stacks)
    assert (code, err) == (0, "")
    upstream = ("registry.k8s.io/kube-scheduler:v1.30.0", TRITON)  # prod's workload image is upstream too
    expected = {RELEASED: _digest(RELEASED), **{ref: _digest(ref) for ref in upstream}}
    lock = json.loads((stacks / "images.lock.json").read_text())
    assert lock["digests"] == expected and lock["tessera"] == RELEASED and lock["release"] == "v0.2.0"
    assert out.splitlines() == [f"{ref}@{digest}" for ref, digest in sorted(expected.items())]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "registry.k8s.io/kube-scheduler:v1.30.0: "),
        ("fixed:sha256:" + "0" * 64, "looks made up: it repeats '0'"),
        ("fixed:latest", "'latest' is not a sha256 digest"),
    ],
    ids=["registry cannot resolve", "registry answers a patterned digest", "tool prints no digest"],
)
def test_lock_writes_nothing_when_a_digest_is_not_real(capsys: pytest.CaptureFixture[str], crane: Path, stacks: Path, setup: str, message: str) -> None:
    if setup == "missing":
        (crane.parent / "missing").write_text("registry.k8s.io/kube-scheduler:v1.30.0\n")
    else:
        (crane.parent / "fixed").write_text(setup.removeprefix("fixed:"))
    code, _, err = _lock(capsys, crane, stacks)
    assert code == 2 and message in err
    assert not (stacks / "images.lock.json").exists()


def test_lock_without_the_registry_tool_says_so(capsys: pytest.CaptureFixture[str], stacks: Path) -> None:
    code, _, err = _run(capsys, "lock", stacks, "--tessera", RELEASED, "--resolve-command", "no-such-crane digest", "-o", stacks / "l.json")
    assert code == 2 and "no-such-crane: command not found" in err


def _images(path: Path) -> dict[str, Any]:
    images: dict[str, Any] = yaml.safe_load(path.read_text())["config"]["tessera:images"]
    return images


def test_pin_writes_the_digests_into_prod_only_and_keeps_its_comments(capsys: pytest.CaptureFixture[str], crane: Path, stacks: Path) -> None:
    assert _lock(capsys, crane, stacks)[0] == 0
    before = {p.name: p.read_text() for p in stacks.glob("Pulumi.*.yaml")}
    code, out, err = _run(capsys, "pin", stacks / "images.lock.json", stacks)
    assert (code, err) == (0, "")
    assert f"{stacks / 'Pulumi.dev.yaml'}: no tessera:images section; deploys by tag, not pinned" in out.splitlines()
    assert (stacks / "Pulumi.dev.yaml").read_text() == before["Pulumi.dev.yaml"]
    assert (stacks / "Pulumi.local.yaml").read_text() == before["Pulumi.local.yaml"]
    prod = (stacks / "Pulumi.prod.yaml").read_text()
    assert _images(stacks / "Pulumi.prod.yaml") == {
        "requireDigests": True,
        "tessera": {"repository": "ghcr.io/acme/tessera", "tag": "0.2.0", "digest": _digest(RELEASED)},
        "kubeScheduler": {"repository": "registry.k8s.io/kube-scheduler", "tag": "v1.30.0", "digest": _digest("registry.k8s.io/kube-scheduler:v1.30.0")},
    }
    (workload,) = yaml.safe_load(prod)["config"]["tessera:workloads"]
    assert workload["image"] == {"repository": "nvcr.io/nvidia/tritonserver", "tag": "24.08-py3", "digest": _digest(TRITON)}
    old_lines, new_lines = before["Pulumi.prod.yaml"].splitlines(), prod.splitlines()
    assert [line for line in old_lines if line.lstrip().startswith("#")] == [line for line in new_lines if line.lstrip().startswith("#")]
    assert len(new_lines) == len(old_lines) + 2, "two digest lines added, the rest (the workload's flow-style image too) edited in place"
    # pinned prod is valid and strict, and pinning again changes nothing
    assert main(["validate", str(stacks / "Pulumi.prod.yaml")]) == 0
    assert _run(capsys, "pin", stacks / "images.lock.json", stacks / "Pulumi.prod.yaml")[0] == 0
    assert (stacks / "Pulumi.prod.yaml").read_text() == prod


FLOW_STACK = """config:
  tessera:cluster: {provider: existing, name: lab, kubernetesVersion: "1.31.2", kubeconfig: {path: /k}}
  tessera:images: {pullPolicy: Always}  # flow style
  tessera:nodePools:
    - {name: lab, kind: shared, nodeSelector: {pool: lab}, gpuModel: T4, gpuCount: 1, minSize: 1, maxSize: 1}
"""


def test_pin_adds_what_a_flow_style_section_lacks(capsys: pytest.CaptureFixture[str], crane: Path, tmp_path: Path) -> None:
    (tmp_path / "Pulumi.lab.yaml").write_text(FLOW_STACK)
    assert _run(capsys, "lock", tmp_path / "Pulumi.lab.yaml", "--tessera", RELEASED, "--resolve-command", f"{crane} digest", "-o", tmp_path / "l.json")[0] == 0
    assert _run(capsys, "pin", tmp_path / "l.json", tmp_path / "Pulumi.lab.yaml")[0] == 0
    images = _images(tmp_path / "Pulumi.lab.yaml")
    assert images["pullPolicy"] == "Always" and images["requireDigests"] is True
    assert images["kubeScheduler"] == {"repository": "registry.k8s.io/kube-scheduler", "tag": "v1.31.2", "digest": _digest("registry.k8s.io/kube-scheduler:v1.31.2")}
    assert "# flow style" in (tmp_path / "Pulumi.lab.yaml").read_text()


WORKLOADS_STACK = FLOW_STACK + """  tessera:workloads:
    - name: by-tag
      namespace: team
      image:
        repository: nvcr.io/nvidia/tritonserver
        tag: 24.08-py3   # block style: the digest goes on a line of its own
      pool: lab
      gpu: {core: 50}
    - name: pinned-by-team
      namespace: team
      image: {repository: registry.example.com/ml/server, tag: "1.0", digest: %s}
      pool: lab
      gpu: {core: 50}
""" % _digest("the team's own pin")


def test_pin_gives_workload_images_the_digest_of_their_tag_and_keeps_a_teams_own(capsys: pytest.CaptureFixture[str], crane: Path, tmp_path: Path) -> None:
    (tmp_path / "Pulumi.lab.yaml").write_text(WORKLOADS_STACK)
    assert _run(capsys, "lock", tmp_path / "Pulumi.lab.yaml", "--tessera", RELEASED, "--resolve-command", f"{crane} digest", "-o", tmp_path / "l.json")[0] == 0
    assert set(json.loads((tmp_path / "l.json").read_text())["digests"]) == {RELEASED, "registry.k8s.io/kube-scheduler:v1.31.2", TRITON}
    assert _run(capsys, "pin", tmp_path / "l.json", tmp_path / "Pulumi.lab.yaml")[0] == 0
    text = (tmp_path / "Pulumi.lab.yaml").read_text()
    by_tag, pinned = yaml.safe_load(text)["config"]["tessera:workloads"]
    assert by_tag["image"] == {"repository": "nvcr.io/nvidia/tritonserver", "tag": "24.08-py3", "digest": _digest(TRITON)}
    assert pinned["image"]["digest"] == _digest("the team's own pin")
    assert "# block style" in text and main(["validate", str(tmp_path / "Pulumi.lab.yaml")]) == 0


@pytest.mark.parametrize(
    ("lock", "message"),
    [
        ({"schemaVersion": 1, "tessera": RELEASED, "digests": {RELEASED: _digest(RELEASED)}}, "the lock has no digest for registry.k8s.io/kube-scheduler:v1.30.0"),
        ({"schemaVersion": 1, "tessera": RELEASED, "digests": {RELEASED: "sha256:" + "deadbeef" * 8}}, "digests: ghcr.io/acme/tessera:0.2.0: sha256:deadbeefdead... looks made up"),
        ({"schemaVersion": 2, "tessera": RELEASED, "digests": {RELEASED: _digest(RELEASED)}}, "schemaVersion: must be 1, got 2"),
        ({"schemaVersion": 1, "tesera": RELEASED, "digests": {}}, "tesera: unknown key"),
    ],
    ids=["ref missing from lock", "patterned digest in lock", "unknown schema", "unknown key"],
)
def test_pin_refuses_a_bad_lock_and_writes_nothing(capsys: pytest.CaptureFixture[str], stacks: Path, lock: dict[str, Any], message: str) -> None:
    (stacks / "images.lock.json").write_text(json.dumps(lock))
    before = (stacks / "Pulumi.prod.yaml").read_text()
    code, _, err = _run(capsys, "pin", stacks / "images.lock.json", stacks)
    assert code == 2 and message in err and "Traceback" not in err
    assert (stacks / "Pulumi.prod.yaml").read_text() == before


def _rendered_workload_images(stack: Path) -> list[tuple[str, dict[str, Any]]]:
    from tessera.model import load_stack_file
    from tessera.manifests.stack import build_stack

    kinds = {"Deployment": "kubernetes:apps/v1:Deployment", "DaemonSet": "kubernetes:apps/v1:DaemonSet", "CronJob": "kubernetes:batch/v1:CronJob", "Job": "kubernetes:batch/v1:Job"}
    return [(kinds[o["kind"]], o) for objs in build_stack(load_stack_file(stack)).values() for o in objs if o["kind"] in kinds]


def _pack_violations(stack: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    code, out, _ = _run(capsys, "policy-config", stack)
    assert code == 0
    settings = PolicySettings(require_image_digests=json.loads(out)["tessera-images-pinned"]["requireImageDigests"])
    return [v for rtype, obj in _rendered_workload_images(stack) for v in check_images_pinned(rtype, obj, settings)]


def test_policy_pack_is_strict_exactly_when_the_stack_is(capsys: pytest.CaptureFixture[str], crane: Path, stacks: Path) -> None:
    """Before a release prod previews with tags; once pinned, the pack requires digests and they are there."""
    for stack in sorted(stacks.glob("Pulumi.*.yaml")):
        assert _pack_violations(stack, capsys) == [], stack.name
    assert _lock(capsys, crane, stacks)[0] == 0 and _run(capsys, "pin", stacks / "images.lock.json", stacks)[0] == 0
    code, out, _ = _run(capsys, "policy-config", stacks / "Pulumi.prod.yaml")
    assert json.loads(out) == {"tessera-images-pinned": {"requireImageDigests": True}}
    assert _pack_violations(stacks / "Pulumi.prod.yaml", capsys) == []
    # strict for real: the same pack config refuses an image by tag
    deployment = {"spec": {"template": {"spec": {"containers": [{"image": RELEASED}]}}}}
    assert check_images_pinned("kubernetes:apps/v1:Deployment", deployment, PolicySettings(require_image_digests=True))


def test_policy_config_of_an_invalid_stack_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "Pulumi.bad.yaml").write_text("config:\n  tessera:images: {requireDigests: maybe}\n")
    code, out, err = _run(capsys, "policy-config", tmp_path / "Pulumi.bad.yaml")
    assert code == 2 and out == "" and "images.requireDigests" in err


def test_lock_refuses_a_tessera_digest_other_than_the_one_pushed(capsys: pytest.CaptureFixture[str], crane: Path, stacks: Path) -> None:
    pushed = "sha256:" + hashlib.sha256(b"what the build pushed").hexdigest()
    code, _, err = _run(capsys, "lock", stacks, "--tessera", RELEASED, "--resolve-command", f"{crane} digest", "--expect-tessera-digest", pushed, "-o", stacks / "images.lock.json")
    assert code == 2 and f"{RELEASED}: the registry reports {_digest(RELEASED)}, the build pushed {pushed}" in err
    assert not (stacks / "images.lock.json").exists()
