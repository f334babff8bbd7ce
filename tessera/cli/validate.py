"""`tessera validate STACK_FILE...`: check stack files before anything reaches the cloud.

Exit 0 when every file is valid (`<file>: ok`); exit 2 with one `<file>: <path>: <message>` line per
problem otherwise. Never a traceback for a user mistake.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tessera.model import ConfigError, load_stack_file

EXIT_OK = 0
EXIT_INVALID = 2


def problem_lines(file: str, error: ConfigError) -> list[str]:
    return [f"{file}: {problem}" for problem in error.problems]


def expand(paths: list[str]) -> list[str]:
    """Files as given; a directory stands for the Pulumi.*.yaml stack files in it."""
    out: list[str] = []
    for path in paths:
        found = sorted(str(p) for p in Path(path).glob("Pulumi.*.yaml")) if Path(path).is_dir() else []
        out += found or [path]
    return out


def run(args: argparse.Namespace) -> int:
    code = EXIT_OK
    for file in expand(args.stack_files):
        try:
            load_stack_file(file)
        except ConfigError as error:
            code = EXIT_INVALID
            print("\n".join(problem_lines(file, error)), file=sys.stdout)
            continue
        print(f"{file}: ok")
    return code


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "validate",
        help="check stack files (exit 0 valid, 2 invalid)",
        description="Validate Pulumi stack files against Tessera's configuration model. "
        "Prints '<file>: ok' or one '<file>: <path>: <message>' line per problem; exits 2 if any file is invalid.",
    )
    parser.add_argument("stack_files", nargs="+", metavar="STACK_FILE", help="e.g. stacks/Pulumi.dev.yaml; a directory means its Pulumi.*.yaml files")
    parser.set_defaults(handler=run)
