"""Every path into a parsed stack config value, for property tests that mutate one place at a time."""
from __future__ import annotations

from typing import Any


def value_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every value below ``node`` (keys of mappings, indexes of lists), each starting
    with ``prefix``; ``node`` itself is not included."""
    out: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        items: list[tuple[Any, Any]] = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return out
    for key, value in items:
        out.append((*prefix, key))
        out += value_paths(value, (*prefix, key))
    return out
