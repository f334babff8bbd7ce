"""Interned ids: the caches trust an id to mean one value for the life of the process."""
from __future__ import annotations

from tessera.alloc.interning import IdTable


def test_a_value_keeps_its_id_and_ids_are_never_given_twice_across_resets() -> None:
    table = IdTable(limit=3)
    first = [table.id_of(("shape", i)) for i in range(3)]
    assert [table.id_of(("shape", i)) for i in range(3)] == first  # same value, same id
    later = [table.id_of(("shape", i)) for i in range(3, 9)]  # the table resets on the way
    again = table.id_of(("shape", 0))  # forgotten by a reset: a new id, not its old one
    assert len(set(first + later + [again])) == 10


def test_clear_forgets_values_but_not_the_ids_given() -> None:
    table = IdTable(limit=100)
    before = table.id_of("a")
    table.clear()
    assert table.id_of("a") != before
