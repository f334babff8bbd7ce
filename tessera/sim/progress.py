"""A one-line progress bar for long replays (stderr, redrawn in place)."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Callable as `on_progress(done, total)`; draws at most ten times a second."""

    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self._last = 0.0
        self._start = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} pods {now - self._start:5.1f}s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
