"""What each GitHub workflow does, read from .github/workflows (actionlint checks the syntax in `make test`).

Triggers and path filters, the stack matrix against stacks/, the Pulumi steps (policy pack, PR comment),
environments and concurrency, least-privilege permissions, pinned actions and secrets. The release's
shell steps are run for real with a stand-in `crane`.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
PULUMI_ACTION = "pulumi/actions@"
BACKEND_AND_CLOUD = {
    "PULUMI_ACCESS_TOKEN", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
    "TENCENTCLOUD_SECRET_ID", "TENCENTCLOUD_SECRET_KEY",
}
SECRET_NAMES = BACKEND_AND_CLOUD | {"GITHUB_TOKEN", "RELEASE_PR_TOKEN"}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def steps(workflow: str, job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = load(workflow)["jobs"][job]["steps"]
    return found


def step_using(workflow: str, job: str, action: str) -> dict[str, Any]:
    matches = [s for s in steps(workflow, job) if str(s.get("uses", "")).startswith(action)]
    assert len(matches) == 1, f"{workflow}:{job} uses {action} {len(matches)} times"
    return matches[0]


def run_text(workflow: str, job: str) -> str:
    return "\n".join(str(s.get("run", "")) for s in steps(workflow, job))


def github_glob(pattern: str, path: str) -> bool:
    """GitHub's path filter globbing: `**` crosses directories, `*` does not."""
    regex = re.escape(pattern).replace(r"\*\*", "\0").replace(r"\*", "[^/]*").replace("\0", ".*")
    return re.fullmatch(regex, path) is not None


ALL = sorted(p.name for p in WORKFLOWS.glob("*.yml"))


def test_the_workflows_are_the_ones_documented() -> None:
    assert ALL == ["ci.yml", "deploy.yml", "preview.yml", "pulumi-up.yml", "release.yml"]


# --- triggers ----------------------------------------------------------------------------------------

CHANGES = [
    # (changed file, previewed and deployed?)
    ("__main__.py", True),
    ("Pulumi.yaml", True),
    ("components/tessera_pulumi/program.py", True),
    ("tessera/model/platform.py", True),
    ("tessera/manifests/scheduler.py", True),
    ("stacks/Pulumi.prod.yaml", True),
    ("stacks/images.lock.json", True),
    ("policies/tessera_policies/rules.py", True),
    ("requirements.txt", True),
    ("docs/operations.md", False),
    ("README.md", False),
    ("bench/packing.py", False),
]


@pytest.mark.parametrize(("workflow", "event"), [("preview.yml", "pull_request"), ("deploy.yml", "push")])
@pytest.mark.parametrize(("path", "expected"), CHANGES)
def test_program_stack_and_policy_changes_trigger_preview_and_deploy(workflow: str, event: str, path: str, expected: bool) -> None:
    trigger = load(workflow)["on"][event]
    assert trigger["branches"] == ["main"]
    assert any(github_glob(p, path) for p in trigger["paths"]) is expected


def test_release_runs_on_version_tags_only() -> None:
    on = load("release.yml")["on"]
    assert set(on) == {"push"} and set(on["push"]) == {"tags"}
    (pattern,) = on["push"]["tags"]
    # GitHub's filter syntax: `[0-9]+` is one or more digits, `.` is a dot
    regex = re.escape(pattern).replace(r"\[0\-9\]\+", "[0-9]+")
    assert [t for t in ("v0.2.0", "v10.20.30", "v1.2", "1.2.3", "v1.2.3-rc1", "latest") if re.fullmatch(regex, t)] == ["v0.2.0", "v10.20.30"]


def test_ci_runs_the_repository_ci_script() -> None:
    workflow = load("ci.yml")
    assert set(workflow["on"]) == {"pull_request", "push"}
    assert "bash .ci/run" in run_text("ci.yml", "test")


# --- the preview of a pull request ----------------------------------------------------------------------


def preview_matrix() -> list[dict[str, Any]]:
    include: list[dict[str, Any]] = load("preview.yml")["jobs"]["preview"]["strategy"]["matrix"]["include"]
    return include


def test_preview_matrix_is_every_stack_file() -> None:
    assert sorted(entry["stack"] for entry in preview_matrix()) == STACKS
    assert all(isinstance(entry["cloud"], bool) for entry in preview_matrix())
    assert {e["stack"] for e in preview_matrix() if not e["cloud"]} == {"local"}, "only the developer's own cluster is out of CI's reach"


def test_preview_installs_validates_and_diffs_every_stack() -> None:
    job = load("preview.yml")["jobs"]["preview"]
    checkout = step_using("preview.yml", "preview", "actions/checkout@")
    assert checkout["with"]["fetch-depth"] == 0, "the base commit must be there to render it"
    assert checkout["with"]["persist-credentials"] is False
    text = run_text("preview.yml", "preview")
    assert "make install" in text
    assert '.venv/bin/tessera validate "stacks/Pulumi.$STACK.yaml"' in text
    assert job["env"]["STACK"] == "${{ matrix.stack }}"
    diff = next(s for s in steps("preview.yml", "preview") if "render-diff.sh" in str(s.get("run", "")))
    assert diff["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    assert 'scripts/render-diff.sh "$BASE_SHA" "$STACK" --format markdown' in diff["run"]
    assert '>> "$GITHUB_STEP_SUMMARY"' in diff["run"]
    assert 'if [ "$rc" -gt 1 ]; then exit "$rc"; fi' in diff["run"], "exit 1 (changes) is not a failure, 2 is"
    comment = step_using("preview.yml", "preview", "marocchino/sticky-pull-request-comment@")
    assert comment["with"] == {"header": "manifests-${{ matrix.stack }}", "path": "${{ runner.temp }}/manifest-diff.md"}
    assert "manifest-diff.md" in diff["run"]
    assert "if" not in diff, "the manifest diff runs for every stack, forks included"


def _pulumi_version_pin() -> str:
    (version,) = re.findall(r"^pulumi==([0-9.]+)$", (ROOT / "requirements.txt").read_text(), re.M)
    return version


@pytest.mark.parametrize(("workflow", "job", "command"), [("preview.yml", "preview", "preview"), ("pulumi-up.yml", "up", "up")])
def test_pulumi_runs_through_the_official_action_with_the_policy_pack(workflow: str, job: str, command: str) -> None:
    step = step_using(workflow, job, PULUMI_ACTION)
    inputs = step["with"]
    assert inputs["command"] == command
    assert inputs["policyPacks"] == "policies"
    assert inputs["policyPackConfigs"] == "${{ runner.temp }}/policy-config.json"
    assert inputs["pulumi-version"] == _pulumi_version_pin(), "the CLI matching the SDK pin"
    assert inputs["stack-name"] in ("${{ matrix.stack }}", "${{ inputs.stack }}")
    # the pack's config comes from the stack itself, so the pack is strict exactly when validation is
    text = run_text(workflow, job)
    assert '.venv/bin/tessera images policy-config "stacks/Pulumi.$STACK.yaml" > "$RUNNER_TEMP/policy-config.json"' in text
    assert "bash policies/test.sh" in text
    names = [s.get("name") or s.get("uses") for s in steps(workflow, job)]
    assert names.index("Policy pack config for this stack") < names.index(f"pulumi {command}")


def test_preview_comments_on_the_pull_request() -> None:
    inputs = step_using("preview.yml", "preview", PULUMI_ACTION)["with"]
    assert inputs["comment-on-pr"] is True
    assert load("preview.yml")["jobs"]["preview"]["permissions"]["pull-requests"] == "write"


def test_cloud_steps_skip_local_and_fork_pull_requests() -> None:
    job = load("preview.yml")["jobs"]["preview"]
    assert job["env"]["TRUSTED"] == "${{ github.event.pull_request.head.repo.full_name == github.repository }}"
    for step in steps("preview.yml", "preview"):
        needs_secrets = "secrets." in yaml.safe_dump(step) or step.get("name") == "Comment the manifest diff"
        if needs_secrets:
            assert "env.TRUSTED == 'true'" in step["if"], step.get("name")
        if str(step.get("uses", "")).startswith(PULUMI_ACTION):
            assert step["if"] == "matrix.cloud && env.TRUSTED == 'true'"


# --- merge to main: pulumi up per environment ----------------------------------------------------------------


def test_deploy_runs_every_cloud_stack_dev_first() -> None:
    jobs = load("deploy.yml")["jobs"]
    assert sorted(jobs) == sorted(e["stack"] for e in preview_matrix() if e["cloud"])
    for name, job in jobs.items():
        assert job["uses"] == "./.github/workflows/pulumi-up.yml"
        assert job["with"] == {"stack": name}
        assert set(job["secrets"]) == BACKEND_AND_CLOUD
        assert all(value == f"${{{{ secrets.{key} }}}}" for key, value in job["secrets"].items()), "secrets passed one by one, never inherit"
    assert jobs["prod"]["needs"] == "dev"
    assert "needs" not in jobs["dev"]


def test_up_runs_in_the_stacks_environment_one_at_a_time() -> None:
    workflow = load("pulumi-up.yml")
    assert set(workflow["on"]) == {"workflow_call"}
    assert workflow["on"]["workflow_call"]["inputs"]["stack"]["required"] is True
    assert set(workflow["on"]["workflow_call"]["secrets"]) == BACKEND_AND_CLOUD
    job = workflow["jobs"]["up"]
    assert job["environment"] == "${{ inputs.stack }}", "prod's approval rule lives on the prod environment"
    assert job["concurrency"] == {"group": "pulumi-up-${{ inputs.stack }}", "cancel-in-progress": False}
    inputs = step_using("pulumi-up.yml", "up", PULUMI_ACTION)["with"]
    assert inputs["upsert"] is True and "comment-on-pr" not in inputs


def test_preview_concurrency_is_per_pull_request_and_stack() -> None:
    assert load("preview.yml")["jobs"]["preview"]["concurrency"] == {
        "group": "preview-${{ github.event.pull_request.number }}-${{ matrix.stack }}",
        "cancel-in-progress": True,
    }


# --- release --------------------------------------------------------------------------------------------------


def test_release_builds_both_architectures_pushes_to_our_ghcr_signs_and_attaches_an_sbom() -> None:
    build = step_using("release.yml", "image", "docker/build-push-action@")["with"]
    assert build["file"] == "images/Dockerfile" and build["context"] == "."
    assert build["platforms"] == "linux/amd64,linux/arm64"
    assert build["push"] is True and build["sbom"] is True and build["provenance"] == "mode=max"
    assert build["tags"] == "${{ steps.ref.outputs.image }}:${{ steps.ref.outputs.version }}"
    names = [str(s.get("uses", "")).split("@")[0] for s in steps("release.yml", "image")]
    assert names.index("docker/setup-qemu-action") < names.index("docker/setup-buildx-action") < names.index("docker/build-push-action") < names.index("sigstore/cosign-installer")
    text = run_text("release.yml", "image")
    assert 'echo "image=ghcr.io/$owner/tessera"' in text and 'owner="${GITHUB_REPOSITORY_OWNER,,}"' in text
    assert 'cosign sign --yes "$IMAGE"' in text and "cosign verify" in text
    login = step_using("release.yml", "image", "docker/login-action@")["with"]
    assert login == {"registry": "ghcr.io", "username": "${{ github.actor }}", "password": "${{ secrets.GITHUB_TOKEN }}"}


def test_release_opens_a_pull_request_pinning_the_stacks() -> None:
    job = load("release.yml")["jobs"]["pin"]
    assert job["needs"] == "image"
    text = run_text("release.yml", "pin")
    assert '--resolve-command "crane digest"' in text and '--expect-tessera-digest "$DIGEST"' in text
    assert ".venv/bin/tessera images pin stacks/images.lock.json stacks/" in text
    pr = step_using("release.yml", "pin", "peter-evans/create-pull-request@")["with"]
    assert pr["add-paths"] == "stacks/" and pr["base"] == "${{ github.event.repository.default_branch }}"
    assert step_using("release.yml", "pin", "imjasonh/setup-crane@")["with"]["version"].startswith("v")


def _fake_crane(bin_dir: Path) -> None:
    crane = bin_dir / "crane"
    crane.write_text(f"#!{sys.executable}\nimport hashlib, sys\nprint('sha256:' + hashlib.sha256(sys.argv[2].encode()).hexdigest())\n")
    crane.chmod(crane.stat().st_mode | stat.S_IEXEC)


def test_release_pin_steps_run_for_real(tmp_path: Path) -> None:
    """The pin job's shell steps, in order, in a copy of the repository, with a stand-in crane."""
    import hashlib

    shutil.copytree(ROOT / "stacks", tmp_path / "stacks", ignore=shutil.ignore_patterns("images.lock.json"))
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "bin").mkdir()
    _fake_crane(tmp_path / "bin")
    image, version = "ghcr.io/acme/tessera", "0.2.0"
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "IMAGE": image,
        "VERSION": version,
        "DIGEST": "sha256:" + hashlib.sha256(f"{image}:{version}".encode()).hexdigest(),
        "GITHUB_REF_NAME": f"v{version}",
    }
    job = load("release.yml")["jobs"]["pin"]
    assert set(job["env"]) == {"IMAGE", "VERSION", "DIGEST"}
    for step in steps("release.yml", "pin"):
        if "run" in step and "tessera" in step["run"]:
            done = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
            assert done.returncode == 0, f"{step['name']}: {done.stdout}{done.stderr}"
    images = yaml.safe_load((tmp_path / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["tessera:images"]
    assert images["requireDigests"] is True and images["tessera"]["digest"] == env["DIGEST"]
    assert (tmp_path / "stacks" / "images.lock.json").exists()


# --- least privilege, pinned actions, secrets -------------------------------------------------------------------

PERMISSIONS = {
    ("ci.yml", "test"): {"contents": "read"},
    ("preview.yml", "preview"): {"contents": "read", "pull-requests": "write"},
    ("deploy.yml", "dev"): {"contents": "read"},
    ("deploy.yml", "prod"): {"contents": "read"},
    ("pulumi-up.yml", "up"): {"contents": "read"},
    ("release.yml", "image"): {"contents": "read", "packages": "write", "id-token": "write"},
    ("release.yml", "pin"): {"contents": "write", "pull-requests": "write", "packages": "read"},
}


@pytest.mark.parametrize("workflow", ALL)
def test_permissions_are_least_privilege(workflow: str) -> None:
    data = load(workflow)
    assert data["permissions"] == {}, "nothing by default; each job asks for what it needs"
    for name, job in data["jobs"].items():
        assert job["permissions"] == PERMISSIONS[(workflow, name)], f"{workflow}:{name}"
    assert "write-all" not in (WORKFLOWS / workflow).read_text() and "read-all" not in (WORKFLOWS / workflow).read_text()


USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$")


@pytest.mark.parametrize("workflow", ALL)
def test_actions_are_pinned_to_a_commit_with_its_version(workflow: str) -> None:
    found = 0
    for line in (WORKFLOWS / workflow).read_text().splitlines():
        match = USES.match(line)
        if not match or match.group(1).startswith("./"):
            continue
        found += 1
        action, comment = match.groups()
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), f"{action}: pin a full commit SHA"
        assert re.fullmatch(r"\s+# v\d+(\.\d+){0,2}", comment), f"{action}: say which version the SHA is (# vX.Y.Z)"
    assert found or workflow == "deploy.yml"


EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@pytest.mark.parametrize("workflow", ALL)
def test_secrets_come_only_from_the_secrets_context(workflow: str) -> None:
    text = (WORKFLOWS / workflow).read_text()
    used = set(re.findall(r"secrets\.([A-Z_]+)", text))
    assert used <= SECRET_NAMES, used - SECRET_NAMES
    sensitive = re.compile(r"TOKEN|SECRET|PASSWORD|PASSPHRASE|ACCESS_KEY|BACKEND_URL|KEY_ID")

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and sensitive.search(key) and isinstance(value, str) and key not in ("GITHUB_TOKEN",):
                    assert re.fullmatch(r"\$\{\{ secrets\.[A-Z_]+ \}\}", value), f"{workflow}: {key} must come from secrets, got {value!r}"
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(load(workflow)["jobs"])
    for expression in EXPRESSION.findall(text):
        assert "toJSON(secrets" not in expression.replace(" ", ""), "never dump all secrets"


def test_docs_secrets_table_matches_the_workflows() -> None:
    """docs/operations.md lists, per workflow, exactly the secrets it reads."""
    doc = (ROOT / "docs" / "operations.md").read_text()
    section = doc[doc.index("<!-- secrets-table -->") : doc.index("<!-- /secrets-table -->")]
    documented: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[0] != "`secret`":
            documented[cells[0].strip("`")] = {w.strip("` ") for w in cells[1].split(",")}
    used: dict[str, set[str]] = {}
    for workflow in ALL:
        for name in set(re.findall(r"secrets\.([A-Z_]+)", (WORKFLOWS / workflow).read_text())) - {"GITHUB_TOKEN"}:
            used.setdefault(name, set()).add(workflow)
    assert documented == used


def test_no_workflow_uses_an_unpinned_tool_download() -> None:
    for workflow in ALL:
        text = (WORKFLOWS / workflow).read_text()
        assert "curl " not in text and "wget " not in text, f"{workflow}: install tools through pinned actions or the repo's files"
        assert "latest" not in re.sub(r"#.*", "", text), f"{workflow}: no 'latest' versions"


@pytest.mark.skipif(not os.access(ROOT / ".venv" / "bin" / "actionlint", os.X_OK), reason="actionlint is installed by make install")
def test_actionlint_accepts_every_workflow() -> None:
    bin_dir = ROOT / ".venv" / "bin"
    done = subprocess.run(
        [str(bin_dir / "actionlint"), f"-shellcheck={bin_dir / 'shellcheck'}", "-pyflakes=", *map(str, sorted(WORKFLOWS.glob("*.yml")))],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The linter is real: a misspelt key and an injectable expression are errors."""
    actionlint = ROOT / ".venv" / "bin" / "actionlint"
    if not os.access(actionlint, os.X_OK):
        pytest.skip("actionlint is installed by make install")
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: pull_request\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    permissions: {}\n    step:\n      - run: echo hi\n"
        "  b:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo \"${{ github.event.pull_request.title }}\"\n"
    )
    done = subprocess.run([str(actionlint), "-pyflakes=", "-shellcheck=", str(broken)], capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert done.returncode == 1
    assert 'unexpected key "step"' in done.stdout and "potentially untrusted" in done.stdout
