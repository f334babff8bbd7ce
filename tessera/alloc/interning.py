"""Small ints for hashable values the caches key on, so that a look-up hashes an int.

The evaluation caches are consulted once per (node, pod shape) and key on nested tuples (a pod
shape, a node's whole state); hashing those for every node cost more than the look-up, and an
int key is no object for the cyclic collector to walk either.

A table is bounded in entries and in bytes: a pod shape comes from a request, and one request
may carry hundreds of containers or GPU model names, so a count of entries alone says little
about memory. A value's size is estimated once, when it is first interned (`approx_bytes`: the
work is proportional to the value, which the request that brought it already paid to decode).
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterable
from typing import Final, cast

SLOT_BYTES: Final = 100
"""A table entry besides its value: the dict's slot (hash, key, value and index, a third to two
thirds full: 40-80 bytes) and the int id (28-32 bytes)."""
_CONTAINERS: Final = (tuple, frozenset, list)


def approx_bytes(value: object) -> int:
    """An upper bound of the memory `value` holds: `sys.getsizeof` of it and of everything in
    the tuples (named ones included), frozensets and lists it is made of (a cache key's containers), each reference
    counted as if it were the only one."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        total += sys.getsizeof(item)
        if isinstance(item, _CONTAINERS):  # named tuples too (`model.PodShape`)
            stack.extend(cast(Iterable[object], item))
    return total


class IdTable:
    """Ids for values, at most `limit` remembered and at most `max_bytes` of them (their
    `size_of` plus `SLOT_BYTES` each); past either bound the table starts again empty. An id is
    never given out twice, so an id held by a cache entry after the table was reset never comes
    to mean another value. A value larger than `max_bytes` on its own gets a new id every time
    and is not remembered."""

    __slots__ = ("_ids", "_next", "_limit", "_max_bytes", "_bytes", "_size_of")

    def __init__(self, limit: int, max_bytes: int = 16 * 1024 * 1024, size_of: Callable[[Hashable], int] = approx_bytes) -> None:
        self._ids: dict[Hashable, int] = {}
        self._next = 0
        self._limit = limit
        self._max_bytes = max_bytes
        self._bytes = 0
        self._size_of = size_of

    @property
    def estimated_bytes(self) -> int:
        """What the remembered values hold, by the estimate the budget is kept with."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._ids)

    def id_of(self, value: Hashable) -> int:
        found = self._ids.get(value)
        if found is None:
            found = self._next
            self._next += 1
            size = SLOT_BYTES + self._size_of(value)
            if size > self._max_bytes:
                return found
            if len(self._ids) >= self._limit or self._bytes + size > self._max_bytes:
                self.clear()
            self._ids[value] = found
            self._bytes += size
        return found

    def clear(self) -> None:
        """Forget every value (ids already given stay unique)."""
        self._ids.clear()
        self._bytes = 0
