"""scripts/pulumi-stack.sh as a user runs it (`make preview STACK=dev`), with stand-in CLIs on PATH.

The stand-ins record their arguments; the real `tessera validate` is used where it matters. No test
touches the network: `curl` and get.pulumi.com's installer are stand-ins too.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "pulumi-stack.sh"
TOOLS = ("bash", "sed", "head", "grep", "ls", "mkdir", "dirname", "cat", "env", "mktemp", "rm", "sh", "chmod")
PINNED = "3.272.0"
# today's exact message when the CLI is missing and cannot be installed (offline)
OFFLINE = (
    "error: the Pulumi CLI is not installed (or not on PATH).\n"
    f"install the version Tessera is tested with ({PINNED}):\n"
    f"  curl -fsSL https://get.pulumi.com | sh -s -- --version {PINNED}\n"
    '  export PATH="$HOME/.pulumi/bin:$PATH"\n'
    "then run this command again.\n"
)


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture()
def bin_dir(tmp_path: Path) -> Path:
    """A PATH with only basic tools (no pulumi, no tessera, no curl)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (directory / tool).symlink_to(found)
    return directory


def _run(bin_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": str(bin_dir), "HOME": str(bin_dir.parent)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env={**base, **env}, stdin=subprocess.DEVNULL, timeout=60)


@pytest.fixture()
def fake_pulumi(bin_dir: Path) -> Path:
    log = bin_dir.parent / "pulumi.log"
    _stub(bin_dir / "pulumi", f'echo "$*" >> {log}\n')
    return log


@pytest.fixture()
def fake_tessera(bin_dir: Path) -> Path:
    path = bin_dir / "tessera-ok"
    _stub(path, 'echo "validated $*"\n')
    return path


@pytest.fixture()
def fake_curl(bin_dir: Path) -> Path:
    """curl that is offline unless $FAKE_INSTALLER names a script to hand out as get.pulumi.com."""
    log = bin_dir.parent / "curl.log"
    _stub(
        bin_dir / "curl",
        f'echo "$*" >> {log}\n'
        'out=""\n'
        'while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
        'if [ -z "${FAKE_INSTALLER:-}" ]; then echo "curl: (6) Could not resolve host: get.pulumi.com" >&2; exit 6; fi\n'
        'cat "$FAKE_INSTALLER" > "$out"\n',
    )
    return log


@pytest.fixture()
def fake_installer(tmp_path: Path) -> Path:
    """get.pulumi.com's installer as far as the script uses it: --version V --install-root DIR
    --no-edit-path, leaving DIR/bin/pulumi (a stand-in answering `version` with vV)."""
    path = tmp_path / "install.sh"
    log, pulumi_log = tmp_path / "installer.log", tmp_path / "pulumi.log"
    path.write_text(
        f'echo "$*" >> {log}\n'
        'version=""; root=""\n'
        'while [ $# -gt 0 ]; do\n'
        '  case "$1" in --version) version="$2"; shift;; --install-root) root="$2"; shift;; esac\n'
        '  shift\n'
        'done\n'
        'mkdir -p "$root/bin"\n'
        'printf \'#!/usr/bin/env bash\\nif [ "$1" = version ]; then echo v%s; exit 0; fi\\necho "$*" >> %s\\n\' '
        f'"$version" "{pulumi_log}" > "$root/bin/pulumi"\n'
        'chmod +x "$root/bin/pulumi"\n'
    )
    return path


def test_the_pin_is_the_sdk_version_in_requirements() -> None:
    assert f"pulumi=={PINNED}\n" in (ROOT / "requirements.txt").read_text()


def test_missing_pulumi_without_curl_says_how_to_install_it(bin_dir: Path, fake_tessera: Path, tmp_path: Path) -> None:
    result = _run(bin_dir, "preview", "dev", TESSERA_BIN=str(fake_tessera), TESSERA_PULUMI_HOME=str(tmp_path / "p"))
    assert result.returncode == 127
    assert result.stderr == OFFLINE


def test_missing_pulumi_offline_keeps_the_exact_message(bin_dir: Path, fake_tessera: Path, fake_curl: Path, tmp_path: Path) -> None:
    home = tmp_path / "p"
    result = _run(bin_dir, "preview", "dev", TESSERA_BIN=str(fake_tessera), TESSERA_PULUMI_HOME=str(home))
    assert result.returncode == 127
    assert result.stderr == OFFLINE
    assert "https://get.pulumi.com" in fake_curl.read_text()  # it did try
    assert not home.exists()


def _install_env(fake_tessera: Path, home: Path, installer: Path) -> dict[str, str]:
    return {"TESSERA_BIN": str(fake_tessera), "TESSERA_PULUMI_HOME": str(home), "FAKE_INSTALLER": str(installer),
            "PULUMI_CONFIG_PASSPHRASE": "", "PULUMI_BACKEND_URL": "file:///tmp/x"}


def test_missing_pulumi_is_installed_into_the_project_at_the_pinned_version(
    bin_dir: Path, fake_tessera: Path, fake_curl: Path, fake_installer: Path, tmp_path: Path
) -> None:
    home = tmp_path / "project" / ".pulumi"
    env = _install_env(fake_tessera, home, fake_installer)
    result = _run(bin_dir, "preview", "dev", **env)
    assert result.returncode == 0, result.stderr
    assert f"==> installing the Pulumi CLI {PINNED} into {home}/bin" in result.stdout
    assert (tmp_path / "installer.log").read_text() == f"--version {PINNED} --install-root {home} --no-edit-path\n"
    assert (tmp_path / "pulumi.log").read_text().splitlines() == ["login file:///tmp/x", "stack select --create dev", "preview --stack dev"]
    # the next run uses the project's copy: no second download
    again = _run(bin_dir, "preview", "dev", **env)
    assert again.returncode == 0, again.stderr
    assert len(fake_curl.read_text().splitlines()) == 1 and "installing" not in again.stdout


def test_the_default_project_folder_is_dot_pulumi_and_git_ignored() -> None:
    assert 'home_dir="${TESSERA_PULUMI_HOME:-$ROOT/.pulumi}"' in SCRIPT.read_text()
    ignored = subprocess.run(["git", "check-ignore", "-q", ".pulumi/bin/pulumi"], cwd=ROOT, check=False)
    assert ignored.returncode == 0


def test_a_project_copy_of_another_version_is_replaced(bin_dir: Path, fake_tessera: Path, fake_curl: Path, fake_installer: Path, tmp_path: Path) -> None:
    home = tmp_path / ".pulumi"
    (home / "bin").mkdir(parents=True)
    _stub(home / "bin" / "pulumi", "echo v3.100.0\n")
    result = _run(bin_dir, "preview", "dev", **_install_env(fake_tessera, home, fake_installer))
    assert result.returncode == 0, result.stderr
    assert f"--version {PINNED}" in (tmp_path / "installer.log").read_text()


def test_no_download_when_told_not_to(bin_dir: Path, fake_tessera: Path, fake_curl: Path, fake_installer: Path, tmp_path: Path) -> None:
    env = {**_install_env(fake_tessera, tmp_path / "p", fake_installer), "TESSERA_PULUMI_INSTALL": "0"}
    result = _run(bin_dir, "preview", "dev", **env)
    assert result.returncode == 127 and result.stderr == OFFLINE
    assert not fake_curl.exists()


def test_a_failing_installer_says_so_then_how_to_install(bin_dir: Path, fake_tessera: Path, fake_curl: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.sh"
    broken.write_text('echo "error: failed to download pulumi-v3.272.0-linux-x64.tar.gz" >&2\nexit 1\n')
    result = _run(bin_dir, "preview", "dev", TESSERA_BIN=str(fake_tessera), TESSERA_PULUMI_HOME=str(tmp_path / "p"), FAKE_INSTALLER=str(broken))
    assert result.returncode == 127
    assert "failed to download" in result.stderr
    assert result.stderr.endswith("error: the Pulumi installer failed (its output is above).\n" + OFFLINE)


def test_a_broken_stack_fails_first_with_its_path_even_without_pulumi(bin_dir: Path, fake_curl: Path) -> None:
    """The stack is validated before anything about the Pulumi CLI is checked or downloaded."""
    bad = bin_dir / "tessera-bad"
    _stub(bad, 'echo "$2: nodePools[0].maxSize: must be at least minSize" >&2\nexit 2\n')
    result = _run(bin_dir, "preview", "dev", TESSERA_BIN=str(bad))
    assert result.returncode == 2
    assert result.stderr.startswith(f"{ROOT}/stacks/Pulumi.dev.yaml: nodePools[0].maxSize: must be at least minSize\n")
    assert "Pulumi CLI" not in result.stderr
    assert not fake_curl.exists()


BROKEN_DEV_STACKS = [
    ("policy: fixed-share", "policy: fair-share", "sharing.policy"),
    # a misspelt namespace: Pulumi would hand the quotas to nobody
    ("tessera:quotas:", "tesera:quotas:", "tesera:quotas: unknown config namespace 'tesera' (did you mean 'tessera:quotas'?"),
]


@pytest.mark.parametrize(("old", "new", "reported"), BROKEN_DEV_STACKS, ids=["bad-value", "misspelt-namespace"])
def test_the_real_validate_reports_a_broken_stack_before_the_cli_check(bin_dir: Path, tmp_path: Path, old: str, new: str, reported: str) -> None:
    """The real `tessera validate`, on a copy of the script beside a broken copy of the dev stack."""
    tessera = ROOT / ".venv" / "bin" / "tessera"
    if not tessera.exists():
        pytest.fail("run `make install` first: .venv/bin/tessera is missing")
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    (copy / "stacks").mkdir()
    shutil.copy(SCRIPT, copy / "scripts" / SCRIPT.name)
    shutil.copy(ROOT / "requirements.txt", copy / "requirements.txt")
    text = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text()
    assert old in text
    (copy / "stacks" / "Pulumi.dev.yaml").write_text(text.replace(old, new))
    result = subprocess.run(
        ["bash", str(copy / "scripts" / SCRIPT.name), "preview", "dev"], capture_output=True, text=True, timeout=120,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), "TESSERA_BIN": str(tessera)}, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    output = result.stdout + result.stderr  # `tessera validate` prints its problems on stdout
    assert f"{copy}/stacks/Pulumi.dev.yaml: " in output and reported in output
    assert "Pulumi CLI" not in output


def test_preview_validates_then_logs_in_to_the_local_backend_and_previews(bin_dir: Path, fake_pulumi: Path, fake_tessera: Path) -> None:
    result = _run(bin_dir, "preview", "dev", "--diff", TESSERA_BIN=str(fake_tessera), PULUMI_CONFIG_PASSPHRASE="")
    assert result.returncode == 0, result.stderr
    assert f"validated validate {ROOT}/stacks/Pulumi.dev.yaml" in result.stdout
    assert fake_pulumi.read_text().splitlines() == [
        f"login file://{ROOT}/.pulumi-state",
        "stack select --create dev",
        "preview --stack dev --diff",
    ]


def test_a_configured_backend_is_used_as_is(bin_dir: Path, fake_pulumi: Path, fake_tessera: Path) -> None:
    backend = "s3://tessera-state?endpoint=cos.ap-guangzhou.myqcloud.com&region=ap-guangzhou&s3ForcePathStyle=true"
    result = _run(bin_dir, "up", "prod", TESSERA_BIN=str(fake_tessera), PULUMI_BACKEND_URL=backend, PULUMI_CONFIG_PASSPHRASE_FILE="/run/secrets/pp")
    assert result.returncode == 0, result.stderr
    assert fake_pulumi.read_text().splitlines() == [f"login {backend}", "stack select --create prod", "up --stack prod"]


def test_an_invalid_stack_never_reaches_pulumi(bin_dir: Path, fake_pulumi: Path, tmp_path: Path) -> None:
    bad = bin_dir / "tessera-bad"
    _stub(bad, 'echo "stacks/Pulumi.dev.yaml: nodePools[0].maxSize: must be at least minSize" >&2\nexit 2\n')
    result = _run(bin_dir, "up", "dev", TESSERA_BIN=str(bad), PULUMI_CONFIG_PASSPHRASE="x")
    assert result.returncode == 2
    assert "nodePools[0].maxSize" in result.stderr
    assert not fake_pulumi.exists()


def test_the_real_validate_accepts_the_dev_stack(bin_dir: Path, fake_pulumi: Path) -> None:
    tessera = ROOT / ".venv" / "bin" / "tessera"
    if not tessera.exists():
        pytest.fail("run `make install` first: .venv/bin/tessera is missing")
    result = _run(bin_dir, "preview", "dev", TESSERA_BIN=str(tessera), PULUMI_CONFIG_PASSPHRASE="x", PULUMI_BACKEND_URL="file:///tmp/x")
    assert result.returncode == 0, result.stderr
    assert "preview --stack dev" in fake_pulumi.read_text()


def test_file_backend_without_passphrase_in_ci_explains_what_to_set(bin_dir: Path, fake_pulumi: Path, fake_tessera: Path) -> None:
    result = _run(bin_dir, "preview", "dev", TESSERA_BIN=str(fake_tessera), PULUMI_BACKEND_URL="file:///tmp/state")
    assert result.returncode == 2
    assert "PULUMI_CONFIG_PASSPHRASE" in result.stderr
    assert "preview" not in fake_pulumi.read_text()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ((), 64, "usage:"),
        (("deploy", "dev"), 64, "unknown action 'deploy'"),
        (("preview", "no-such-stack"), 2, "no stack file stacks/Pulumi.no-such-stack.yaml"),
        (("preview", "../etc"), 64, "may only contain"),
    ],
)
def test_usage_errors(bin_dir: Path, args: tuple[str, ...], code: int, message: str) -> None:
    result = _run(bin_dir, *args)
    assert result.returncode == code
    assert message in result.stderr


def test_script_is_executable() -> None:
    assert os.access(SCRIPT, os.X_OK)
