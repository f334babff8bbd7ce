"""Writing `tessera render` output into a directory that may hold older output and the user's files.

Render records every file it writes in an index, `.tessera-render`, in the output directory. On
the next run, files listed there that the stack no longer renders are removed, and folders left
empty by that go too, so `kubectl apply -f DIR` never re-applies a component the stack dropped.
Nothing else is ever deleted: a file render did not write stays, and one that sits where render
wants to write is not overwritten (`RenderConflict`). Directories written before the index existed
are recognised by the header render puts in each file (`RENDER_MARK`).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

INDEX_FILE: Final = ".tessera-render"
RENDER_MARK: Final = "# Rendered by `tessera render`"
_INDEX_HEADER: Final = (
    "# Files `tessera render` wrote into this directory; it removes them when the stack no longer\n"
    "# renders them and never touches other files. Do not edit.\n"
)


class RenderConflict(Exception):
    """Files render would overwrite but did not write; `paths` are relative to the directory."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = tuple(sorted(paths))
        super().__init__(", ".join(self.paths))


@dataclass(frozen=True)
class WriteReport:
    written: tuple[str, ...]
    removed: tuple[str, ...]  # stale files render wrote before, and folders they left empty


def _safe(entry: str) -> str | None:
    """An index entry as a relative path inside the directory, or None (never trusted blindly:
    the index is a file anyone can edit)."""
    path = PurePosixPath(entry)
    if not entry or path.is_absolute() or any(part in ("", ".", "..") for part in entry.split("/")):
        return None
    return str(path)


def read_index(out_dir: Path) -> set[str] | None:
    """What render wrote last time, or None when the directory has no index."""
    try:
        text = (out_dir / INDEX_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return set()  # unreadable: trust nothing, delete nothing
    entries = (line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {safe for safe in map(_safe, entries) if safe is not None}


def _has_mark(path: Path) -> bool:
    """Render's header within the first two lines (scripts start with their `#!` line)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            head = [handle.readline() for _ in range(2)]
    except OSError:
        return False
    return any(line.startswith(RENDER_MARK) for line in head)


def _legacy_owned(out_dir: Path) -> set[str]:
    """Files with render's header, top level and one folder down (where render writes)."""
    owned: set[str] = set()
    for path in [*out_dir.glob("*"), *out_dir.glob("*/*")]:
        if path.is_file() and not path.is_symlink() and _inside(out_dir, path) and _has_mark(path):
            owned.add(path.relative_to(out_dir).as_posix())
    return owned


def owned_files(out_dir: Path) -> set[str]:
    """The files `tessera render` wrote in `out_dir` and that are still there: those its index
    names, or, in a directory rendered before the index existed, those carrying its header."""
    listed = read_index(out_dir)
    names = _legacy_owned(out_dir) if listed is None else listed
    return {name for name in names if (out_dir / name).is_file() and _inside(out_dir, out_dir / name)}


def _conflicts(out_dir: Path, files: Mapping[str, str], previous: set[str]) -> list[str]:
    found = []
    for name in files:
        target = out_dir / name
        if target.is_dir() and not target.is_symlink():
            found.append(name)
        elif (target.exists() or target.is_symlink()) and name not in previous and not _has_mark(target):
            found.append(name)
    return found


def _inside(out_dir: Path, target: Path) -> bool:
    """No folder between `out_dir` and `target` is a link (deleting through one could reach
    files outside the directory)."""
    return not any(p.is_symlink() for p in target.parents if out_dir in p.parents)


def _remove_stale(out_dir: Path, stale: Iterable[str]) -> list[str]:
    removed: list[str] = []
    parents: set[Path] = set()
    for name in sorted(stale):
        target = out_dir / name
        if not _inside(out_dir, target):
            continue
        if target.is_symlink() or target.is_file():
            target.unlink()
            removed.append(name)
        parents.update(p for p in target.parents if p != out_dir and out_dir in p.parents)
    # deepest first; only folders that are empty now (a user's file keeps its folder)
    for folder in sorted(parents, key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
            folder.rmdir()
            removed.append(folder.relative_to(out_dir).as_posix() + "/")
    return removed


def _write_index(out_dir: Path, names: Iterable[str]) -> None:
    tmp = out_dir / (INDEX_FILE + ".tmp")
    tmp.write_text(_INDEX_HEADER + "".join(f"{n}\n" for n in sorted(names)), encoding="utf-8")
    os.replace(tmp, out_dir / INDEX_FILE)


def write_output(out_dir: Path, files: Mapping[str, str]) -> WriteReport:
    """Write `files` (relative name -> text) into `out_dir` and remove what render wrote there
    before and no longer renders. Raises `RenderConflict` (nothing written) or `OSError`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    index = read_index(out_dir)
    previous = index if index is not None else _legacy_owned(out_dir)
    conflicts = _conflicts(out_dir, files, previous)
    if conflicts:
        raise RenderConflict(conflicts)
    for name, text in files.items():
        target = out_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()  # render's own file was replaced by a link: write a file, not through it
        target.write_text(text, encoding="utf-8")
        if target.suffix == ".sh":
            target.chmod(0o755)
    removed = _remove_stale(out_dir, previous - set(files))
    _write_index(out_dir, files)
    return WriteReport(tuple(files), tuple(removed))
