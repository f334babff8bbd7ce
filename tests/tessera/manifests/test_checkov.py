"""checkov finds no failed check in any stack's rendered manifests or the Dockerfile beyond the
documented skip list (scripts/checkov.sh; reasons in docs/deployment.md).

Slow: about 30-50 s with `.venv-checkov` in place, plus a few minutes the first time to create it.
"""
from __future__ import annotations

import re
import subprocess

import pytest
from manifests_helpers import ROOT

SCRIPT = ROOT / "scripts" / "checkov.sh"
EXIT_NO_CHECKOV = 3


@pytest.mark.slow
def test_checkov_passes_with_only_documented_skips() -> None:
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=1200, cwd=ROOT, check=False)
    if result.returncode == EXIT_NO_CHECKOV:
        pytest.skip(f"checkov could not be installed: {result.stderr.strip()[-300:]}")
    failed = [line for line in result.stdout.splitlines() if line.startswith("Check:") or "FAILED" in line]
    assert result.returncode == 0, "\n".join(failed) or result.stderr[-2000:]
    assert len(re.findall(r"Passed checks: \d+, Failed checks: 0", result.stdout)) >= 2  # manifests and Dockerfile ran


def test_every_skipped_check_is_justified_in_the_docs() -> None:
    script = SCRIPT.read_text()
    skipped = set(re.findall(r"^\s+(CKV\w+)\s", script, flags=re.M)) | {"CKV_K8S_43"}
    docs = (ROOT / "docs" / "deployment.md").read_text()
    documented = set(re.findall(r"^\| `(CKV\w+)` \|", docs, flags=re.M))
    assert skipped == documented
