"""`freeze_survivors` takes long-lived state out of full collections without leaking young cycles.
Run in a subprocess: it changes the collector of the whole process."""
from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import gc
    import weakref
    from tessera.scheduler.gc_freeze import freeze_survivors

    class Node:
        pass

    state = [{"name": str(i), "gpus": [i, i + 1]} for i in range(20_000)]  # built at start-up
    frozen = freeze_survivors()
    assert frozen >= 40_000, frozen
    assert freeze_survivors() >= frozen  # idempotent: one callback
    assert sum(cb.__name__ == "_after_full_collection" for cb in gc.callbacks) == 1

    # cycles that become garbage while young are still reclaimed
    refs = []
    for _ in range(5_000):
        node = Node()
        node.me = node
        refs.append(weakref.ref(node))
    del node
    gc.collect()
    assert all(ref() is None for ref in refs)

    # what survives a full collection after start-up leaves the collector's walk too
    later = [{"name": str(i), "pods": [i]} for i in range(20_000)]
    gc.collect()
    assert gc.get_freeze_count() >= frozen + 40_000, (gc.get_freeze_count(), frozen)
    print("ok", len(state), len(later))
    """
)


def test_survivors_leave_full_collections_and_young_cycles_are_still_reclaimed() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok 20000 20000"
