"""The package's generated files are what the model and the analyzer give today, and staleness is
reported as a diff with the command that fixes it.

args/ is generated from the stack config model (tessera_pulumi.package.codegen); schema.json is the
schema the provider's GetSchema serves, inferred by the Pulumi SDK's analyzer from args/ and the
components (tessera_pulumi.package.schema). Both run in-process: no Pulumi CLI.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tessera_pulumi.package import codegen, schema

ROOT = Path(__file__).resolve().parents[3]


def test_args_modules_are_generated_from_todays_model() -> None:
    problem = codegen.stale(codegen.ARGS_DIR, codegen.render())
    assert not problem, f"args/ is stale; run {codegen.REGENERATE}\n{problem}"


def test_schema_snapshot_is_what_the_provider_serves() -> None:
    assert schema.SCHEMA_PATH == ROOT / "components" / "schema.json"
    committed = schema.SCHEMA_PATH.read_text(encoding="utf-8")
    problem = schema.diff(committed, schema.render())
    assert not problem, f"components/schema.json is stale; run {schema.REGENERATE}\n{problem}"


def test_a_stale_args_module_fails_the_check_with_a_diff_and_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    files = codegen.render()
    stale = tmp_path / "args"
    codegen.write(stale, {**files, "pools.py": files["pools.py"].replace('"""Pool name', '"""The pool name', 1)})
    monkeypatch.setattr(codegen, "ARGS_DIR", stale)
    assert codegen.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert '-    """The pool name' in out and '+    """Pool name' in out
    assert "args/pools.py" in out and "python -m tessera_pulumi.package.codegen" in out
    assert (stale / "pools.py").read_text(encoding="utf-8").count('"""The pool name') == 1  # --check writes nothing


def test_regenerating_removes_an_args_module_the_model_no_longer_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "args"
    codegen.write(target, {**codegen.render(), "quotas.py": "class Gone: ...\n"})
    monkeypatch.setattr(codegen, "ARGS_DIR", target)
    # the schema step runs in a fresh interpreter on the committed files; it is tested above
    monkeypatch.setattr(codegen.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    assert codegen.main(["--check"]) == 1
    assert "-class Gone: ..." in capsys.readouterr().out
    assert codegen.main([]) == 0
    assert not (target / "quotas.py").exists()
    assert codegen.stale(target, codegen.render()) == ""


def test_a_stale_schema_fails_the_check_with_a_diff_and_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "schema.json"
    text = schema.render()
    stale.write_text(text.replace('"GPU node pools (at least one)."', '"GPU node pools."', 1), encoding="utf-8")
    monkeypatch.setattr(schema, "SCHEMA_PATH", stale)
    assert schema.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert '-          "description": "GPU node pools.",' in out
    assert '+          "description": "GPU node pools (at least one).",' in out
    assert "python -m tessera_pulumi.package.codegen" in out


def test_regenerating_rewrites_a_stale_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "schema.json"
    target.write_text("{}\n", encoding="utf-8")
    monkeypatch.setattr(schema, "SCHEMA_PATH", target)
    assert schema.main([]) == 0
    assert target.read_text(encoding="utf-8") == schema.render()


def test_make_package_schema_says_what_it_did_also_when_nothing_changed() -> None:
    # the committed tree is up to date (the tests above), so the check, as `make` runs it, says so
    result = subprocess.run(["make", "-s", "package-schema", "PY=" + sys.executable], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"components/tessera_pulumi/package/args: {len(codegen.render())} files, already up to date",
        "components/schema.json: already up to date",
    ]
