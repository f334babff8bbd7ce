"""A manifest Diff as plain text (terminals, logs) or Markdown (PR comments, job summaries).

Values are shown in one line each: short scalars as JSON, anything long or multi-line as a
summary (`<text: 12 lines, sha256 1a2b3c4d>`) followed, for text, by the changed lines. Secret
values are never shown, not even their length. Markdown stays under GitHub's comment limit
(65,536 characters): past `max_chars` the remaining objects are counted, not listed.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any, Final

from tessera.manifests.diff import MISSING, Diff, EntryDiff, FieldChange, Status

INLINE_LIMIT: Final = 160  # characters of a value shown inline (an image reference with its digest fits)
LINE_DIFF_LIMIT: Final = 30  # changed lines shown per multi-line text
FIELD_LIMIT: Final = 50  # fields listed per object
MARKDOWN_LIMIT: Final = 60_000  # a GitHub comment holds 65,536 characters
SIGN: Final = {"added": "+", "removed": "-", "changed": "~"}


def show(value: Any, sensitive: bool = False) -> str:
    """One-line rendering of a field value."""
    if value is MISSING:
        return "(absent)"
    if sensitive:
        return "(secret, not shown)"
    if isinstance(value, str):
        if "\n" in value.rstrip("\n"):
            digest = hashlib.sha256(value.encode()).hexdigest()[:8]
            return f"<text: {len(value.splitlines())} lines, sha256 {digest}>"
        if len(value) > INLINE_LIMIT:
            return f"<{len(value)} characters, sha256 {hashlib.sha256(value.encode()).hexdigest()[:8]}>"
        return json.dumps(value, ensure_ascii=False)
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= INLINE_LIMIT:
        return text
    if isinstance(value, dict):
        return f"<mapping: {len(value)} keys>"
    if isinstance(value, list):
        return f"<list: {len(value)} items>"
    return text[: INLINE_LIMIT - 1] + "…"


def line_diff(change: FieldChange) -> list[str]:
    """Changed lines of a multi-line text field (unified, no context), capped; [] for anything else."""
    old, new = change.old, change.new
    if change.sensitive or not isinstance(old, str) or not isinstance(new, str) or "\n" not in old + new:
        return []
    lines = [line for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0) if not line.startswith(("---", "+++", "@@"))]
    if len(lines) > LINE_DIFF_LIMIT:
        lines = [*lines[:LINE_DIFF_LIMIT], f"… {len(lines) - LINE_DIFF_LIMIT} more changed lines"]
    return lines


def counts(diff: Diff) -> str:
    return ", ".join(f"{len(diff.of(status))} {status}" for status in ("changed", "added", "removed"))


def _where(entry: EntryDiff) -> str:
    if entry.moved:
        return f"  [{entry.base_file} -> {entry.head_file}] (moved)"
    return "" if entry.label == entry.file else f"  [{entry.file}]"


# --- plain text ------------------------------------------------------------------------------------


def to_text(diff: Diff, title: str = "rendered manifests") -> str:
    if diff.empty:
        return f"{title}: no changes\n"
    lines = [f"{title}: {counts(diff)}"]
    for entry in diff.entries:
        lines.append(f"{SIGN[entry.status]} {entry.label}{_where(entry)}")
        for change in entry.fields[:FIELD_LIMIT]:
            lines.append(f"    {change.path or '(file)'}: {show(change.old, change.sensitive)} -> {show(change.new, change.sensitive)}")
            lines += [f"        {line}" for line in line_diff(change)]
        if len(entry.fields) > FIELD_LIMIT:
            lines.append(f"    … {len(entry.fields) - FIELD_LIMIT} more fields")
    return "\n".join(lines) + "\n"


# --- Markdown --------------------------------------------------------------------------------------


def code(text: str) -> str:
    """An inline code span that survives backticks in the text and sits safely in a table cell."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{fence}{pad}{text}{pad}{fence}".replace("|", "\\|")


def _fenced(lines: list[str], language: str) -> list[str]:
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", *lines, fence]


def _md_where(entry: EntryDiff) -> str:
    if entry.moved:
        return f" moved from {code(entry.base_file or '')} to {code(entry.head_file or '')}"
    return "" if entry.label == entry.file else f" in {code(entry.file)}"


def _entry_markdown(entry: EntryDiff) -> list[str]:
    out = [f"**{code(entry.label)}**{_md_where(entry)}", ""]
    if not entry.fields:
        return out
    out += ["| field | base | head |", "| --- | --- | --- |"]
    texts: list[tuple[str, list[str]]] = []
    for change in entry.fields[:FIELD_LIMIT]:
        out.append(f"| {code(change.path or '(file)')} | {code(show(change.old, change.sensitive))} | {code(show(change.new, change.sensitive))} |")
        lines = line_diff(change)
        if lines:
            texts.append((change.path or "(file)", lines))
    if len(entry.fields) > FIELD_LIMIT:
        out.append(f"| … {len(entry.fields) - FIELD_LIMIT} more fields | | |")
    out.append("")
    for path, lines in texts:
        out += [f"{code(path)}:", "", *_fenced(lines, "diff"), ""]
    return out


def _section(heading: str, entries: Iterable[EntryDiff]) -> list[list[str]]:
    """Blocks of one section: its heading, then one block per entry (a list item or a field table)."""
    blocks = [[f"#### {heading}", ""]]
    for entry in entries:
        if entry.status == "changed":
            blocks.append(_entry_markdown(entry))
        else:
            blocks.append([f"- {code(entry.label)}{_md_where(entry)}"])
    return blocks


def to_markdown(diff: Diff, title: str = "Rendered manifests", max_chars: int = MARKDOWN_LIMIT) -> str:
    head = [f"### {title}", ""]
    if diff.empty:
        return "\n".join([*head, "No changes to the rendered Kubernetes objects.", ""])
    head += [f"{counts(diff)} (objects keyed by apiVersion/kind/namespace/name).", ""]
    out = list(head)
    size = sum(len(line) + 1 for line in out)
    shown = 0
    total = len(diff.entries)
    sections: tuple[tuple[Status, str], ...] = (("changed", "Changed"), ("added", "Added"), ("removed", "Removed"))
    for status, heading in sections:
        entries = diff.of(status)
        if not entries:
            continue
        blocks = _section(heading, entries)
        for i, block in enumerate(blocks):
            if status != "changed" and i == len(blocks) - 1:
                block = [*block, ""]  # a blank line closes the list
            cost = sum(len(line) + 1 for line in block)
            if size + cost > max_chars - 200:  # room for the note below
                out += ["", f"… {total - shown} more objects not shown (comment size limit); run `tessera diff` locally for all of them.", ""]
                return "\n".join(out)
            out += block
            size += cost
            shown += i > 0
    return "\n".join(out)
