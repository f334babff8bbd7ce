"""Running the real `promtool` (Debian's `prometheus` package, installed by `make test` when run as root).

A missing promtool fails these tests: CI must run them. Locally, `TESSERA_SKIP_PROMTOOL=1` skips
them instead, and never under CI (`CI` set), where a skip would hide a broken install step.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

INSTALL_HINT = "install it with `apt-get install -y prometheus` (Debian's package, as `make test` does when run as root)"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is not None:
        return found
    if os.environ.get("TESSERA_SKIP_PROMTOOL") == "1" and not os.environ.get("CI"):
        pytest.skip("promtool not installed and TESSERA_SKIP_PROMTOOL=1")
    pytest.fail(f"promtool is not on PATH; {INSTALL_HINT} (or set TESSERA_SKIP_PROMTOOL=1 to skip locally)")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def write_rules(path: Path, groups: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def check_rules(path: Path) -> subprocess.CompletedProcess[str]:
    return run("check", "rules", path.name, cwd=path.parent)
