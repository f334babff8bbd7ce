"""Progress of long replays on stderr: a bar redrawn in place on a terminal, else (a CI log, a pipe)
a plain line every few seconds and one at the end."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Callable as `on_progress(done, total)`; draws at most ten times a second."""

    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30, *, plain_every_s: float = 5.0) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self._terminal = self.stream.isatty()
        self._every = 0.1 if self._terminal else plain_every_s
        self._start = time.monotonic()
        self._last = self._start if not self._terminal else 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < self._every:
            return
        self._last = now
        if not self._terminal:
            self.stream.write(f"{self.label}: {done}/{total} pods, {now - self._start:.1f} s\n")
            self.stream.flush()
            return
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} pods {now - self._start:5.1f}s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
