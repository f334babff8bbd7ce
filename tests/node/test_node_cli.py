"""`tessera-node` and `tessera node`: one set of node commands, reached two ways.

`tessera node` finds the commands through the `tessera.node_commands` entry points (the tessera
package never imports tessera_node); `tessera-node` is the node package's own console script.
Both must offer the same commands with the same options and behave alike on a user mistake.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = ("device-plugin", "agent")
SCRIPT_ONLY = ("dra-plugin",)  # `tessera node` finds it once the entry points are installed again (pip install -e .)


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _tessera_node() -> list[str]:
    script = shutil.which("tessera-node", path=str(Path(sys.executable).parent))
    assert script, "the tessera-node console script is not installed (pyproject [project.scripts])"
    return [script]


@pytest.mark.parametrize("command", COMMANDS)
def test_both_entries_offer_the_same_options(command: str) -> None:
    via_tessera = _run([sys.executable, "-m", "tessera.cli.main", "node", command, "--help"])
    via_script = _run([*_tessera_node(), command, "--help"])
    assert via_tessera.returncode == via_script.returncode == 0, via_tessera.stderr + via_script.stderr
    # the same text but for the program name argparse prints
    # (help text that names `tessera node ...` itself reads the same once both are normalised)
    assert via_tessera.stdout.replace("tessera node", "PROG") == via_script.stdout.replace("tessera-node", "PROG").replace("tessera node", "PROG")


def test_tessera_node_lists_every_node_command() -> None:
    result = _run([*_tessera_node(), "--help"])
    assert result.returncode == 0
    assert all(command in result.stdout for command in (*COMMANDS, *SCRIPT_ONLY))


def test_a_missing_node_name_is_the_same_clear_error_both_ways() -> None:
    args = ["device-plugin", "--simulate", "T4:1"]
    env_free = {"PATH": "/usr/bin:/bin"}  # no NODE_NAME
    via_tessera = subprocess.run([sys.executable, "-m", "tessera.cli.main", "node", *args], capture_output=True, text=True, timeout=120, env=env_free, check=False)
    via_script = subprocess.run([*_tessera_node(), *args], capture_output=True, text=True, timeout=120, env=env_free, check=False)
    assert via_tessera.returncode == via_script.returncode == 2
    assert via_tessera.stderr == via_script.stderr
    assert "no node name" in via_script.stderr and "Traceback" not in via_script.stderr
