"""Configuration problems: a config path (camelCase keys, list indexes) and a message."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

PathPart = str | int


def format_path(parts: Iterable[PathPart]) -> str:
    """('nodePools', 2, 'mig', 'profile') -> 'nodePools[2].mig.profile'; odd keys are quoted: labels["a/b"]."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENTIFIER.match(part) or (not text and ":" in part):
            text += f".{part}" if text else part
        else:
            text += f'["{part}"]'
    return text


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a stack config."""

    path: str  # e.g. nodePools[2].mig.profile; "" for the file as a whole
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def at(*parts: PathPart) -> str:
    return format_path(parts)


class ConfigError(Exception):
    """Raised by the loaders; ``problems`` lists everything wrong, ``str()`` gives one `path: message` per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class SemanticErrors(ValueError):
    """Cross-field problems raised inside StackConfig's validator and unpacked by errors.py."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
