"""`tessera render STACK_FILE -o DIR`: the stack's in-cluster objects as YAML, for review and GitOps.

Wiring only: load and validate the stack file (same messages as `tessera validate`), call the pure
renderer, write the files. Exit codes: 0 written, 2 invalid stack file, 1 output not writable.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tessera.model import ConfigError, load_stack_file
from tessera.manifests.render import NODES_DIR, OWNED_FILE, RELEASE_DIRS, render_files

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
            "clusters nodes/label-nodes.sh with the pools' node labels and taints. Output is "
            "identical on every run; files render wrote before and no longer needs are removed."
        ),
    )
    parser.add_argument("stack_file", metavar="STACK_FILE", type=Path, help="Pulumi stack file, e.g. stacks/Pulumi.prod.yaml")
    parser.add_argument("-o", "--output", metavar="DIR", type=Path, required=True, help="output directory (created if missing)")
    parser.set_defaults(handler=run)


def _stale(out_dir: Path, keep: set[str]) -> list[Path]:
    stale = [p for p in out_dir.iterdir() if p.is_file() and OWNED_FILE.match(p.name) and p.name not in keep]
    for sub, suffix in (*((d, ".yaml") for d in RELEASE_DIRS), (NODES_DIR, ".sh")):
        if (out_dir / sub).is_dir():
            stale += [p for p in (out_dir / sub).iterdir() if p.is_file() and p.suffix == suffix and f"{sub}/{p.name}" not in keep]
    return sorted(stale)


def write_files(out_dir: Path, files: dict[str, str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in _stale(out_dir, set(files)):
        stale.unlink()
    for name, text in files.items():
        target = out_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        if target.suffix == ".sh":
            target.chmod(0o755)


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
        write_files(args.output, files)
    except OSError as error:
        print(f"cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
        return EXIT_IO
    for name in files:
        print(args.output / name)
    return 0
