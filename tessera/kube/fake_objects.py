"""What every table of `FakeKubeApi` does to the objects it keeps: private copies and timestamps."""
from __future__ import annotations

import pickle
import time
from typing import Any

_PICKLE = pickle.HIGHEST_PROTOCOL


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def deep_copy(obj: Any) -> Any:
    """A deep copy of a JSON-shaped object (dicts, lists, strings, numbers): the store hands out
    copies, so a caller's edits never reach it."""
    return pickle.loads(pickle.dumps(obj, _PICKLE))
