"""`tessera node device-plugin|agent`: the node DaemonSet's processes. Wiring only."""
from __future__ import annotations

import argparse
from typing import Any


def _device_plugin(args: argparse.Namespace) -> int:
    from tessera_node.deviceplugin.cli import run

    return run(args)


def _agent(args: argparse.Namespace) -> int:
    from tessera_node.agent.cli import run

    return run(args)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("node", help="run the node side: device plugin, isolation agent")
    commands = parser.add_subparsers(dest="node_command", required=True, metavar="NODE_COMMAND")
    plugin = commands.add_parser("device-plugin", help="advertise tessera.dev/gpu-core to kubelet and check each container's allocation")
    from tessera_node.deviceplugin.cli import add_arguments as plugin_arguments

    plugin_arguments(plugin)
    plugin.set_defaults(handler=_device_plugin)
    agent = commands.add_parser("agent", help="enforce isolation (MPS, memory, online/offline) and export GPU metrics")
    try:
        from tessera_node.agent.cli import add_arguments as agent_arguments
    except ImportError:  # the agent is optional for a plugin-only install
        agent.set_defaults(handler=lambda _args: _unavailable())
        return
    agent_arguments(agent)
    agent.set_defaults(handler=_agent)


def _unavailable() -> int:
    import sys

    print("error: the node agent is not installed in this build", file=sys.stderr)
    return 1
