"""Keep the extender's long-lived state out of the garbage collector's full collections.

At 10,000 nodes the node cache, the evaluation caches and, with `--simulate`, the in-memory API
server's store are millions of container objects. A full (generation 2) collection of CPython's
cyclic collector walks every one of them while holding the GIL: 1.3 s at 1,000 nodes and 0.3-1.1 s
every ~12 requests at 10,000 (bench/scale_memory.py, docs/benchmarks.md "Scale curve"), inside
whatever /filter happened to allocate then, so that its p99 was the collector's pause.

`freeze_survivors()` collects once and moves everything alive into the permanent generation
(`gc.freeze`, made for state built at start-up), and does so again after every later full
collection: each full collection then walks only what was allocated since the previous one.
Garbage cycles among young objects are still reclaimed by the collections of generations 0-2.
What is given up: a reference cycle made only of objects that had already survived a full
collection is never reclaimed. The extender's state is trees (dicts, lists, dataclasses without
back-references), so none forms there; the end-of-run RSS against the after-start RSS of
`bench/scale.py` is the check.

Process-wide: only the process's entry point (`tessera scheduler serve`) calls it.
"""
from __future__ import annotations

import gc
from typing import Any


def _after_full_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def freeze_survivors() -> int:
    """Collect, freeze what is alive, and freeze the survivors of every later full collection
    (idempotent). Returns how many objects are frozen now."""
    gc.collect()
    gc.freeze()
    if _after_full_collection not in gc.callbacks:
        gc.callbacks.append(_after_full_collection)
    return gc.get_freeze_count()
