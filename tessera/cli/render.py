"""`tessera render STACK_FILE -o DIR`: the stack's in-cluster objects as YAML, for review and GitOps.

Wiring only: load and validate the stack file (same messages as `tessera validate`), call the pure
renderer, write the files (`tessera.manifests.render_dir`: only files render wrote are ever removed or
overwritten). Exit codes: 0 written, 2 invalid stack file, 1 output not writable or a file render
did not write is in the way.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tessera.model import ConfigError, load_stack_file
from tessera.manifests.render import render_files
from tessera.manifests.render_dir import INDEX_FILE, RenderConflict, write_output

EXIT_INVALID = 2
EXIT_IO = 1


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "render",
        help="write the stack's Kubernetes objects as YAML (one file per component)",
        description=(
            "Render every in-cluster object of a stack into DIR: NN-<component>.yaml in apply order "
            "(kubectl apply -f DIR), gpu-operator/ and prometheus-adapter/ with each Helm release's values "
            "and description, and on existing "
            "clusters nodes/label-nodes.sh with the pools' node labels and taints (a fallback for clusters "
            "`pulumi up` does not manage: Pulumi applies them itself). Output is "
            f"identical on every run. DIR/{INDEX_FILE} lists what render wrote: files it wrote before and "
            "no longer renders are removed; other files in DIR are never touched."
        ),
    )
    parser.add_argument("stack_file", metavar="STACK_FILE", type=Path, help="Pulumi stack file, e.g. stacks/Pulumi.prod.yaml")
    parser.add_argument("-o", "--output", metavar="DIR", type=Path, required=True, help="output directory (created if missing)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    path: Path = args.stack_file
    try:
        config = load_stack_file(path)
    except ConfigError as error:
        for problem in error.problems:
            print(f"{path}: {problem}", file=sys.stderr)
        return EXIT_INVALID
    files = render_files(config, path.name)
    try:
        report = write_output(args.output, files)
    except RenderConflict as conflict:
        for name in conflict.paths:
            print(f"{args.output / name}: not written by tessera render; move it away or render into another directory", file=sys.stderr)
        return EXIT_IO
    except OSError as error:
        print(f"cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
        return EXIT_IO
    for name in report.written:
        print(args.output / name)
    for name in report.removed:
        shown = f"{args.output / name}/" if name.endswith("/") else str(args.output / name)
        print(f"removed {shown} (rendered before, not by this stack)", file=sys.stderr)
    return 0
