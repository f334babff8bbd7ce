"""`tessera-node device-plugin|agent|dra-plugin`: the node DaemonSet's processes. Wiring only.

The same commands answer as `tessera node device-plugin|agent|dra-plugin`: the `tessera` CLI finds them through
the `tessera.node_commands` entry points (pyproject.toml), which name the `NodeCommand`s below, so the
`tessera` package never imports this one. A command's module is imported only when its parser is
built.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NodeCommand:
    """One node process: its one-line help and the module that parses (`add_arguments`) and runs it (`run`)."""

    help: str
    module: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        importlib.import_module(self.module).add_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        code: int = importlib.import_module(self.module).run(args)
        return code


DEVICE_PLUGIN = NodeCommand("advertise tessera.dev/gpu-core to kubelet and check each container's allocation", "tessera_node.deviceplugin.cli")
AGENT = NodeCommand("enforce isolation (MPS, memory, online/offline) and export GPU metrics", "tessera_node.agent.cli")
DRA_PLUGIN = NodeCommand("serve the node's GPUs to kubelet as DRA driver gpu.tessera.dev (ResourceSlices, prepare/unprepare, CDI)", "tessera_node.dra.cli")
COMMANDS: dict[str, NodeCommand] = {"device-plugin": DEVICE_PLUGIN, "agent": AGENT, "dra-plugin": DRA_PLUGIN}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tessera-node", description="Tessera's node side: device plugin, DRA plugin and isolation agent.")
    commands: Any = parser.add_subparsers(dest="node_command", required=True, metavar="NODE_COMMAND")
    for name, command in COMMANDS.items():
        sub: argparse.ArgumentParser = commands.add_parser(name, help=command.help)
        command.add_arguments(sub)
        sub.set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
