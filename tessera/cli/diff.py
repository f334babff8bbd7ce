"""`tessera diff BASE HEAD`: what a stack change does to the rendered Kubernetes objects.

Wiring only: read each side (a `tessera render` output directory, or a stack file rendered in
memory), call the pure diff, print it as text or Markdown. Exit codes follow diff(1): 0 no
change, 1 changes, 2 trouble (a side that cannot be read or an invalid stack file).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tessera.model import ConfigError, load_stack_file
from tessera.manifests.diff import DiffInputError, Entry, diff_entries, read_render
from tessera.manifests.diff_report import to_markdown, to_text
from tessera.manifests.render import render_files
from tessera.manifests.render_dir import INDEX_FILE, owned_files

EXIT_SAME = 0
EXIT_CHANGED = 1
EXIT_TROUBLE = 2


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "diff",
        help="compare two renders: objects added, removed and changed, with the changed fields",
        description=(
            "Compare the Kubernetes objects of two renders of a stack. BASE and HEAD are each a directory "
            "written by `tessera render` (an empty directory is a stack that did not exist) or a stack file, "
            "rendered in memory. Objects are keyed by apiVersion/kind/namespace/name, whichever file holds "
            "them; a change lists its fields by dotted path, old -> new. Secret values are never shown. "
            "Exit 0: no change, 1: changes, 2: an input cannot be read."
        ),
    )
    parser.add_argument("base", metavar="BASE", type=Path, help="render directory or stack file before the change")
    parser.add_argument("head", metavar="HEAD", type=Path, help="render directory or stack file after the change")
    parser.add_argument("--format", choices=("text", "markdown"), default="text", help="text (default) or markdown for PR comments and job summaries")
    parser.add_argument("--title", default=None, help="heading of the report, e.g. 'Rendered manifests: prod'")
    parser.set_defaults(handler=run)


def _render_dir(directory: Path) -> dict[str, str]:
    """The files `tessera render` owns in a directory (what it writes; anything else is not ours)."""
    if (directory / INDEX_FILE).exists():
        names = owned_files(directory)
    else:
        # not written by this `tessera render` (older renders, hand-made or CI directories): the
        # YAML and scripts where render puts them; reading more than render wrote is harmless
        names = {p.relative_to(directory).as_posix() for p in [*directory.glob("*.yaml"), *directory.glob("*/*.yaml"), *directory.glob("*/*.sh")] if p.is_file()}
    files: dict[str, str] = {}
    problems: list[str] = []
    for name in sorted(names):
        try:
            files[name] = (directory / name).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            problems.append(f"{directory / name}: not UTF-8 text")
        except OSError as error:
            problems.append(f"{directory / name}: cannot read: {error.strerror or error}")
    if problems:
        raise DiffInputError(problems)
    return files


def read_side(path: Path) -> dict[str, str]:
    """A render as file name -> text; DiffInputError with `path: message` lines when it cannot be had."""
    if path.is_dir():
        return _render_dir(path)
    if not path.exists():
        raise DiffInputError([f"{path}: no such file or directory (give a `tessera render` output directory or a stack file)"])
    try:
        config = load_stack_file(path)
    except ConfigError as error:
        raise DiffInputError([f"{path}: {problem}" for problem in error.problems]) from None
    return render_files(config, path.name)


def _entries(files: dict[str, str], root: Path) -> dict[str, Entry]:
    """Read one side; errors name the file within that side (`out/base/00-platform.yaml:3: ...`)."""
    try:
        return read_render(files)
    except DiffInputError as error:
        where = f"{root}/" if root.is_dir() else f"{root} (rendered) "
        raise DiffInputError([where + line for line in error.lines]) from None


def run(args: argparse.Namespace) -> int:
    try:
        base = _entries(read_side(args.base), args.base)
        head = _entries(read_side(args.head), args.head)
    except DiffInputError as error:
        print("\n".join(error.lines), file=sys.stderr)
        return EXIT_TROUBLE
    diff = diff_entries(base, head)
    if args.format == "markdown":
        sys.stdout.write(to_markdown(diff, args.title or "Rendered manifests"))
    else:
        sys.stdout.write(to_text(diff, args.title or "rendered manifests"))
    return EXIT_SAME if diff.empty else EXIT_CHANGED
