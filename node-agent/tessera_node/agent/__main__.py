"""`python -m tessera_node.agent ...`: the same as `tessera node agent ...` (used by the
DaemonSet's lease-guard container and by tests that run the agent as a process)."""
from __future__ import annotations

import argparse
import sys

from tessera_node.agent.cli import add_arguments, run


def main() -> int:
    parser = argparse.ArgumentParser(prog="tessera node agent", description="Tessera node isolation agent")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
