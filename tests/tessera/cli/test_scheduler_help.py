"""`tessera scheduler --help` lists every endpoint the extender serves, preempt included."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tessera.scheduler.http_server import POST_VERBS


def _help(*args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "tessera.cli.main", *args, "--help"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


# every POST verb the HTTP server routes (read from the server itself), and its GET endpoints
VERBS = sorted(POST_VERBS)


@pytest.mark.parametrize("args", [("scheduler",), ("scheduler", "serve")])
def test_help_lists_every_endpoint(args: tuple[str, ...]) -> None:
    text = _help(*args)
    assert "preempt" in VERBS
    for verb in VERBS:
        assert f"POST /{verb}" in text, f"/{verb} missing from `tessera {' '.join(args)} --help`"
    for path in ("/healthz", "/metrics"):
        assert f"GET  {path}" in text


def test_the_one_line_summary_names_preempt_too() -> None:
    words = " ".join(_help("scheduler").split())  # argparse wraps long lines
    summary = words[words.index("serve serve "):].split(" options:")[0]
    assert all(f"/{verb}" in summary for verb in VERBS), summary
