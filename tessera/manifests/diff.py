"""Two renders of a stack -> what a reviewer needs to see: the pure core of `tessera diff`.

A render (the files `tessera render` writes, as a name -> text mapping) is read into entries:
every Kubernetes object keyed by apiVersion/kind/namespace/name, whatever file it is in (so an
object moving to another file is a move, not a removal plus an addition), and every other file
(Helm values, release descriptions, the node label script) keyed by its path. Two sets of entries
give objects added, removed and changed; a change lists its fields by dotted path with the old and
the new value. Strings that hold a JSON or YAML document on both sides (the pools ConfigMap, the
scheduler's configuration) are compared inside, so a one-line policy edit is one field, not a
whole blob. Values under a Secret's `data`/`stringData` are marked sensitive: reports never show
them.

No I/O here; `tessera/cli/diff.py` reads directories and stack files, `diff_report.py` formats.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import yaml

Status = Literal["added", "removed", "changed"]
EMBEDDED_SEPARATOR: Final = "/"  # path separator between a string field and the document inside it
_PLAIN_KEY: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_SECRET_FIELDS: Final = ("data", "stringData")


class _Missing:
    """The value of a field that does not exist on one side (distinct from an explicit null)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


class DiffInputError(ValueError):
    """A render that cannot be read; `lines` are `file:line: message` texts for the user."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Entry:
    """One thing a render contains: a Kubernetes object, a data file or a text file."""

    key: str  # identity across renders
    label: str  # how a reviewer reads it
    file: str
    data: Any  # the object/document, or the text of a file that is not YAML data
    secret: bool = False


@dataclass(frozen=True)
class FieldChange:
    path: str  # dotted path; "" for the whole entry (a text file)
    old: Any  # MISSING when the field is new
    new: Any  # MISSING when the field is gone
    sensitive: bool = False


@dataclass(frozen=True)
class EntryDiff:
    status: Status
    label: str
    base_file: str | None
    head_file: str | None
    fields: tuple[FieldChange, ...] = ()

    @property
    def moved(self) -> bool:
        return self.status == "changed" and self.base_file != self.head_file

    @property
    def file(self) -> str:
        return self.head_file or self.base_file or ""


@dataclass(frozen=True)
class Diff:
    entries: tuple[EntryDiff, ...] = field(default_factory=tuple)

    def of(self, status: Status) -> list[EntryDiff]:
        return [e for e in self.entries if e.status == status]

    @property
    def empty(self) -> bool:
        return not self.entries


# --- reading a render ------------------------------------------------------------------------------


def _is_object(doc: Any) -> bool:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("apiVersion"), str)
        and isinstance(doc.get("kind"), str)
        and isinstance(meta, dict)
        and isinstance(meta.get("name"), str)
    )


def object_key(doc: Mapping[str, Any]) -> tuple[str, str]:
    """(key, label) of a Kubernetes object: apiVersion/kind/namespace/name; cluster-scoped: no namespace."""
    meta = doc["metadata"]
    namespace = meta.get("namespace")
    where = f"{namespace}/{meta['name']}" if namespace else str(meta["name"])
    return f"{doc['apiVersion']}/{doc['kind']}/{namespace or ''}/{meta['name']}", f"{doc['apiVersion']} {doc['kind']} {where}"


def _yaml_error(name: str, error: yaml.YAMLError) -> DiffInputError:
    mark = getattr(error, "problem_mark", None)
    line = f":{mark.line + 1}" if mark is not None else ""
    reason = " ".join(str(getattr(error, "problem", None) or error).split())
    return DiffInputError([f"{name}{line}: not valid YAML: {reason}"])


def file_entries(name: str, text: str) -> list[Entry]:
    """The entries of one rendered file: its Kubernetes objects, else the file as data or as text."""
    if name.endswith((".yaml", ".yml")):
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as error:
            raise _yaml_error(name, error) from None
        if not docs:
            return []  # only comments: nothing to compare
        if all(_is_object(d) for d in docs):
            out = []
            for doc in docs:
                key, label = object_key(doc)
                out.append(Entry(key, label, name, doc, secret=doc["kind"] == "Secret" and doc["apiVersion"] == "v1"))
            return out
        if len(docs) == 1:
            return [Entry(f"file:{name}", name, name, docs[0])]
    return [Entry(f"file:{name}", name, name, text)]


def read_render(files: Mapping[str, str]) -> dict[str, Entry]:
    """Every entry of a render by key; DiffInputError naming both files if one object is in two."""
    entries: dict[str, Entry] = {}
    problems: list[str] = []
    for name in sorted(files):
        try:
            found = file_entries(name, files[name])
        except DiffInputError as error:
            problems += error.lines
            continue
        for entry in found:
            if entry.key in entries:
                problems.append(f"{name}: {entry.label} is also in {entries[entry.key].file}; a render has each object once")
                continue
            entries[entry.key] = entry
    if problems:
        raise DiffInputError(problems)
    return entries


# --- comparing values ----------------------------------------------------------------------------


def _key_segment(key: Any) -> str:
    text = str(key)
    return f".{text}" if _PLAIN_KEY.match(text) else f"[{json.dumps(text)}]"


def _join(path: str, segment: str) -> str:
    return (path + segment).lstrip(".")


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same type (True is not 1, 1 is not "1": YAML tells them apart)."""
    return type(a) is type(b) and a == b


def _named_items(items: list[Any]) -> dict[str, Any] | None:
    """Lists of objects with unique `name`s (containers, env, volumes, ports) match by name."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    named = {i["name"]: i for i in items}
    return named if len(named) == len(items) else None


def _embedded(text: str) -> Any:
    """The JSON or YAML document a string holds (a mapping or a list), else None."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            pass
    if "\n" in stripped:
        try:
            doc = yaml.safe_load(stripped)
        except yaml.YAMLError:
            return None
        if isinstance(doc, dict | list):
            return doc
    return None


def diff_values(old: Any, new: Any, path: str = "", sensitive: bool = False) -> list[FieldChange]:
    """Every leaf that differs, by dotted path (`a.b[0]["x.y"]`, named list items as `[name=x]`)."""
    if _same(old, new):
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[FieldChange] = []
        for key in list(old) + [k for k in new if k not in old]:
            out += diff_values(old.get(key, MISSING), new.get(key, MISSING), _join(path, _key_segment(key)), sensitive)
        return out
    if isinstance(old, list) and isinstance(new, list):
        old_named, new_named = _named_items(old), _named_items(new)
        if old_named is not None and new_named is not None:
            names = list(old_named) + [n for n in new_named if n not in old_named]
            out = []
            for name in names:
                out += diff_values(old_named.get(name, MISSING), new_named.get(name, MISSING), f"{path}[name={name}]", sensitive)
            if not out and list(old_named) != list(new_named):  # same items, new order
                out.append(FieldChange(path, [i["name"] for i in old], [i["name"] for i in new], sensitive))
            return out
        out = []
        for i in range(max(len(old), len(new))):
            out += diff_values(old[i] if i < len(old) else MISSING, new[i] if i < len(new) else MISSING, f"{path}[{i}]", sensitive)
        return out
    if isinstance(old, str) and isinstance(new, str) and not sensitive:
        old_doc, new_doc = _embedded(old), _embedded(new)
        if old_doc is not None and new_doc is not None:
            inner = diff_values(old_doc, new_doc)
            if inner:
                return [FieldChange(path + EMBEDDED_SEPARATOR + c.path if c.path else path, c.old, c.new) for c in inner]
            # the documents are equal: only the formatting of the string changed
    return [FieldChange(path, old, new, sensitive)]


def _entry_fields(base: Entry, head: Entry) -> list[FieldChange]:
    if not (base.secret and head.secret):
        return diff_values(base.data, head.data)
    out: list[FieldChange] = []
    keys = list(base.data) + [k for k in head.data if k not in base.data]
    for key in keys:
        out += diff_values(base.data.get(key, MISSING), head.data.get(key, MISSING), _join("", _key_segment(key)), key in _SECRET_FIELDS)
    return out


def diff_entries(old: Mapping[str, Entry], new: Mapping[str, Entry]) -> Diff:
    """The Diff of two renders already read by `read_render`."""
    out: list[EntryDiff] = []
    for key in old.keys() - new.keys():
        out.append(EntryDiff("removed", old[key].label, old[key].file, None))
    for key in new.keys() - old.keys():
        out.append(EntryDiff("added", new[key].label, None, new[key].file))
    for key in old.keys() & new.keys():
        a, b = old[key], new[key]
        fields = _entry_fields(a, b)
        if fields or a.file != b.file:
            out.append(EntryDiff("changed", b.label, a.file, b.file, tuple(fields)))
    out.sort(key=lambda e: (e.file, e.label))
    return Diff(tuple(out))
