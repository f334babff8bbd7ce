"""`tessera node device-plugin|agent`: the node DaemonSet's processes. Wiring only.

The node side (`tessera_node`, also installed as the `tessera-node` command) stands beside this
package, not below it: its commands are found through the `tessera.node_commands` entry point group
(pyproject.toml), so no `tessera` module imports `tessera_node`.
"""
from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from typing import Any, Protocol

ENTRY_POINT_GROUP = "tessera.node_commands"


class NodeCommand(Protocol):
    """What an entry point of the group names (`tessera_node.cli.NodeCommand`)."""

    @property
    def help(self) -> str: ...
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
    def run(self, args: argparse.Namespace) -> int: ...


def node_commands() -> dict[str, NodeCommand]:
    """The installed node commands by name, in the order the distribution declares them."""
    return {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("node", help="run the node side: device plugin, isolation agent")
    installed = node_commands()
    if not installed:  # a source tree run without `pip install`: no entry points to find
        parser.set_defaults(handler=lambda _args: _unavailable())
        return
    commands = parser.add_subparsers(dest="node_command", required=True, metavar="NODE_COMMAND")
    for name, command in installed.items():
        command_parser = commands.add_parser(name, help=command.help)
        command.add_arguments(command_parser)
        command_parser.set_defaults(handler=command.run)


def _unavailable() -> int:
    print(f"error: no node commands are installed (entry point group {ENTRY_POINT_GROUP}); reinstall the tessera distribution", file=sys.stderr)
    return 1
