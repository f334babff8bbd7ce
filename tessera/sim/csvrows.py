"""Reading a CSV trace row by row, with `file:line: message` for everything that can be wrong.

The file is read one line at a time (never whole), each line decoded as strict UTF-8 on its own
so a bad byte is reported with its line. Numbers are parsed strictly: finite, not negative, whole
where the column counts whole things, and below a bound the caller chooses. Problems are collected
(up to `MAX_PROBLEMS`) so a user sees every bad line of a hand-edited file at once.
"""
from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

MAX_PROBLEMS: Final = 20
# Host figures (CPU, memory) and times have no catalog bound; 2**53 keeps them exact as floats,
# which is how percentages and JSON carry them.
MAX_EXACT: Final = 2**53
_INTEGER: Final = re.compile(r"[+-]?\d{1,30}")


class TraceError(ValueError):
    """The trace file cannot be used. `problems` are lines `file:line: message` (or `file: message`)."""

    def __init__(self, problems: str | Sequence[str]) -> None:
        self.problems: tuple[str, ...] = (problems,) if isinstance(problems, str) else tuple(problems)
        super().__init__("\n".join(self.problems))


class BadValue(ValueError):
    """One cell is wrong; the row reader adds the file and line."""


@dataclass(frozen=True)
class Row:
    """One data row: cells by column name (stripped), and where it is."""

    path: Path
    line: int
    cells: dict[str, str]

    def text(self, column: str) -> str:
        return self.cells.get(column, "")

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _decoded(handle: BinaryIO, path: Path, position: list[int]) -> Iterator[str]:
    """Lines as text; `position[0]` is the number of the line last handed out."""
    for number, raw in enumerate(handle, start=1):
        position[0] = number
        if b"\x00" in raw:
            raise TraceError(f"{path}:{number}: a NUL byte at byte {raw.index(0) + 1} of the line; is this a CSV text file?")
        try:
            # utf-8-sig on the first line: spreadsheet exports often start with a byte-order mark
            yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(
                f"{path}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line); "
                "save the file as UTF-8"
            ) from None


class Problems:
    """Collects row problems; raises once there are enough, or at the end."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        self.lines.append(line)
        if len(self.lines) >= MAX_PROBLEMS:
            raise TraceError([*self.lines, f"(stopped after {MAX_PROBLEMS} problems)"])

    def raise_any(self) -> None:
        if self.lines:
            raise TraceError(self.lines)


def read_rows(path: Path, required: Sequence[str], problems: Problems) -> Iterator[Row]:
    """Data rows of a CSV file with a header naming at least `required` columns. Structural
    problems (unreadable, not UTF-8, no header, missing columns) raise at once; a row with the
    wrong number of fields goes to `problems` and is skipped."""
    try:
        handle = path.open("rb")
    except IsADirectoryError:
        raise TraceError(f"{path}: cannot read it (a directory); pass the CSV file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read it ({exc.strerror or exc}); check the path") from None
    position = [0]
    with handle:
        reader = csv.reader(_decoded(handle, path, position))
        try:
            yield from _rows(reader, path, required, problems, position)
        except csv.Error as exc:
            raise TraceError(f"{path}:{position[0]}: not a readable CSV line ({exc})") from None
        except OSError as exc:
            raise TraceError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _rows(reader: Iterable[list[str]], path: Path, required: Sequence[str], problems: Problems, position: list[int]) -> Iterator[Row]:
    header: list[str] | None = None
    for fields in reader:
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue  # blank line
        if header is None:
            header = _header(fields, path, required, position[0])
            continue
        if len(fields) != len(header):
            problems.add(f"{path}:{position[0]}: {len(fields)} fields, but the header has {len(header)} ({','.join(header)})")
            continue
        yield Row(path, position[0], {name: value.strip() for name, value in zip(header, fields)})
    if header is None:
        raise TraceError(f"{path}: empty file; expected a header line naming at least {','.join(required)}")


def _header(fields: list[str], path: Path, required: Sequence[str], line: int) -> list[str]:
    names = [f.strip() for f in fields]
    seen: set[str] = set()
    for name in names:
        if not name:
            raise TraceError(f"{path}:{line}: the header has an empty column name")
        if name in seen:
            raise TraceError(f"{path}:{line}: column {name} appears twice in the header")
        seen.add(name)
    missing = [c for c in required if c not in seen]
    if missing:
        raise TraceError(
            f"{path}:{line}: missing column(s) {', '.join(missing)}; the header must name at least {','.join(required)}"
        )
    return names


def number(text: str, column: str, *, whole: bool = True, limit: float = MAX_EXACT, why: str = "") -> float:
    """A cell as a finite number in 0..limit (whole when `whole`); `BadValue` says what is wrong.
    `why` explains the limit (e.g. which catalog entry sets it)."""
    if not text:
        raise BadValue(f"column {column} is empty")
    if _INTEGER.fullmatch(text):
        value: float = int(text)
    else:
        try:
            value = float(text)
        except ValueError:
            raise BadValue(f"{column}={text!r} is not a number") from None
        if not math.isfinite(value):
            raise BadValue(f"{column}={text!r} is not a finite number")
        if whole:
            if value != int(value):
                raise BadValue(f"{column}={text!r} is fractional; it counts whole units")
            value = int(value)
    if value < 0:
        raise BadValue(f"{column}={text!r} is negative")
    if value > limit:
        shown = int(limit) if float(limit).is_integer() else limit
        raise BadValue(f"{column}={text!r} is more than {shown}" + (f" ({why})" if why else ""))
    return value


def whole_number(text: str, column: str, *, limit: int = MAX_EXACT, why: str = "") -> int:
    return int(number(text, column, whole=True, limit=limit, why=why))
