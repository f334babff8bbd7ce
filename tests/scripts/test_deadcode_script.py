"""`make deadcode` (scripts/deadcode.py): the tree is clean, and a function nothing calls fails
the check with its place, while one that only a test calls does not."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "deadcode.py"


def _run(root: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *([str(root)] if root else [])], capture_output=True, text=True, timeout=300, check=False)


def test_the_tree_has_no_dead_code() -> None:
    result = _run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "dead code: none"


def test_a_function_nothing_calls_fails_with_its_place(tmp_path: Path) -> None:
    (tmp_path / "tessera").mkdir()
    (tmp_path / "tessera" / "mod.py").write_text(
        "def used_in_production():\n    return 1\n\n\ndef used_by_a_test():\n    return used_in_production()\n\n\ndef nobody_calls_me():\n    return 2\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mod.py").write_text("from tessera.mod import used_by_a_test\n\n\ndef test_it():\n    assert used_by_a_test() == 1\n")
    result = _run(tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == ["tessera/mod.py:9: unused function 'nobody_calls_me'", "dead code: 1 unused name in production code"]


def test_an_allowance_nothing_needs_is_reported(tmp_path: Path) -> None:
    target = tmp_path / "tessera" / "model"
    target.mkdir(parents=True)
    shutil.copy(ROOT / "tessera" / "model" / "stack.py", target / "stack.py")
    (target / "stack.py").write_text((target / "stack.py").read_text().replace("_check_semantics", "check_semantics_renamed"))
    result = _run(tmp_path)
    assert "scripts/deadcode.py: ALLOWED names tessera/model/stack.py: '_check_semantics', which is used or gone now; drop it" in result.stdout
