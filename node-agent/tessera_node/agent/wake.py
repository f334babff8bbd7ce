"""Online wake-up from the CPU side: pause offline work before NVML can see the online job start.

Why: measured on an H100 (docs/benchmarks.md, "GPU checks"), the driver samples process
utilisation every 200 ms and each sample names only the context that held the GPU at that instant.
While an offline job time-slices with an online one, the online job shows up in roughly every
second sample, so NVML alone saw a burst 0.3-0.9 s after it started, and the online job ran at
half speed meanwhile (kept 94.8 % of its exclusive throughput; target 95 %).

The CPU side moves first: a CUDA process launching kernels and waiting for them uses its CPU, and
the container's cgroup counts that (`cpu.stat usage_usec`) to the microsecond. So, per online
container that shares a GPU with pausable offline work:

- it *wakes* when its CPU use over the last tick reaches `cpu_pct` percent of one core;
- a waking container counts as active for the co-location decision (the offline work is frozen),
  but only speculatively: NVML must confirm it within `confirm_s`. Once the offline work is
  frozen the online job is alone on the GPU, so the next driver sample names it;
- confirmed, the normal NVML rule takes over (resume after `offlineResumeIdleSeconds` idle);
- not confirmed (CPU work that uses no GPU: request parsing, logging, a health check), the
  container's CPU signal is muted for `mute_s`, doubled for each unconfirmed wake in a row up to
  `max_mute_s`, so a container whose CPU is busy without GPU work soon costs offline jobs one
  `confirm_s` pause per `max_mute_s`; a confirmed wake resets the doubling.

Pure: no I/O; the loop passes cumulative CPU readings and the containers NVML saw active.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from tessera_node.registry import ContainerKey


@dataclass(frozen=True)
class WakeSettings:
    cpu_pct: float = 25.0
    """CPU use over one tick, in percent of one core, at which an idle online container wakes.
    Default 25: a serving process between requests sleeps (a few percent at most); one that
    launches kernels and waits for them spins at up to 100 %. 0 turns the CPU signal off."""

    confirm_s: float = 1.0
    """How long a wake may hold offline work frozen without NVML seeing the container active.
    Default 1 s: five driver samples at the 200 ms period measured on an H100."""

    mute_s: float = 10.0
    """After an unconfirmed wake, how long the container's CPU signal is ignored. Default 10 s:
    an occasional CPU-only burst pauses offline work for at most 1 s in 11."""

    max_mute_s: float = 320.0
    """The mute doubles with each unconfirmed wake in a row, up to this. Default 320 s (five
    doublings): a container whose CPU stays busy without GPU work costs offline jobs 1 s of pause
    in about 5 minutes instead of 1 s in 11."""

    @property
    def enabled(self) -> bool:
        return self.cpu_pct > 0


@dataclass
class _Track:
    usage_us: int
    at: float
    pending_since: float | None = None
    muted_until: float = -math.inf
    confirmed_at: float = -math.inf
    strikes: int = 0  # unconfirmed wakes in a row


@dataclass
class WakeCounts:
    wakes: int = 0
    confirmed: int = 0
    unconfirmed: int = 0


@dataclass
class OnlineWakeDetector:
    settings: WakeSettings = field(default_factory=WakeSettings)
    counts: WakeCounts = field(default_factory=WakeCounts)
    _tracks: dict[ContainerKey, _Track] = field(default_factory=dict)

    def observe(self, now: float, usage_us: Mapping[ContainerKey, int | None], confirmed: Set[ContainerKey]) -> set[ContainerKey]:
        """`usage_us`: cumulative CPU time of each watched online container (None: unreadable);
        `confirmed`: online containers NVML saw active in this tick. Returns the containers
        waking now (to be treated as active, speculatively)."""
        waking: set[ContainerKey] = set()
        for key in [k for k in self._tracks if k not in usage_us]:
            del self._tracks[key]  # no longer watched: its next reading starts afresh
        for key, usage in usage_us.items():
            track = self._tracks.get(key)
            if usage is None:
                self._tracks.pop(key, None)
                continue
            if track is None:
                self._tracks[key] = track = _Track(usage, now)
                busy_pct = 0.0  # first reading: no interval to measure yet
            elif usage < track.usage_us or now <= track.at:
                busy_pct = 0.0  # the counter went back (cgroup recreated) or no time passed
                track.usage_us, track.at = usage, now
            else:
                busy_pct = (usage - track.usage_us) / 1e6 / (now - track.at) * 100.0
                track.usage_us, track.at = usage, now
            if key in confirmed:
                if track.pending_since is not None:
                    self.counts.confirmed += 1
                track.pending_since, track.confirmed_at, track.strikes = None, now, 0
                continue
            if now - track.confirmed_at <= self.settings.confirm_s:
                continue  # NVML saw it lately: its idle window, not the CPU, decides
            if busy_pct < self.settings.cpu_pct or now < track.muted_until:
                track.pending_since = None
                continue
            if track.pending_since is None:
                track.pending_since = now
                self.counts.wakes += 1
            if now - track.pending_since <= self.settings.confirm_s:
                waking.add(key)
            else:
                self.counts.unconfirmed += 1
                track.pending_since = None
                track.muted_until = now + min(self.settings.max_mute_s, self.settings.mute_s * 2**track.strikes)
                track.strikes += 1
        return waking
