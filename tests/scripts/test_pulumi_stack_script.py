"""scripts/pulumi-stack.sh as a user runs it (`make preview STACK=dev`), with stand-in CLIs on PATH.

The stand-ins record their arguments; the real `tessera validate` is used where it matters.
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
TOOLS = ("bash", "sed", "head", "grep", "ls", "mkdir", "dirname", "cat", "env")


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture()
def bin_dir(tmp_path: Path) -> Path:
    """A PATH with only basic tools (no pulumi, no tessera)."""
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


def test_missing_pulumi_says_how_to_install_it(bin_dir: Path) -> None:
    result = _run(bin_dir, "preview", "dev")
    assert result.returncode == 127
    assert "curl -fsSL https://get.pulumi.com | sh -s -- --version 3.272.0" in result.stderr


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
