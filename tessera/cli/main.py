"""`tessera` command line: wiring only. Each subcommand lives in its own module with `register()`."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tessera.cli import diff, images, inspect, node, plan, render, repartition, scheduler, sim, validate, webhook

_COMMANDS = (validate, plan, render, diff, sim, inspect, scheduler, webhook, node, repartition, images)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tessera",
        description="GPU sharing for Kubernetes: validate, plan, render, simulate, inspect and run Tessera.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _COMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `tessera plan ... | head`: the reader left; exit quietly like other Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    return code


if __name__ == "__main__":
    sys.exit(main())
