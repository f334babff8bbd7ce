"""Small ints for hashable values the caches key on, so that a look-up hashes an int.

The evaluation caches are consulted once per (node, pod shape) and key on nested tuples (a pod
shape, a node's whole state); hashing those for every node cost more than the look-up, and an
int key is no object for the cyclic collector to walk either.
"""
from __future__ import annotations

from collections.abc import Hashable


class IdTable:
    """Ids for values, at most `limit` remembered. An id is never given out twice, so an id held
    by a cache entry after the table was reset never comes to mean another value."""

    __slots__ = ("_ids", "_next", "_limit")

    def __init__(self, limit: int) -> None:
        self._ids: dict[Hashable, int] = {}
        self._next = 0
        self._limit = limit

    def id_of(self, value: Hashable) -> int:
        found = self._ids.get(value)
        if found is None:
            if len(self._ids) >= self._limit:
                self._ids.clear()
            found = self._ids[value] = self._next
            self._next += 1
        return found

    def clear(self) -> None:
        """Forget every value (ids already given stay unique)."""
        self._ids.clear()
