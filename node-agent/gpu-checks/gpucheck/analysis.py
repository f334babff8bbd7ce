"""Pure figures of the GPU checks: throughput from worker logs, targets, latencies, report shape.

Nothing here touches a GPU, a process or a file, so all of it is unit-tested on machines without
a GPU (tests/node/gpu_checks/). A worker log is the list of monotonic times at which each batch of
`per_batch` matmuls finished (CLOCK_MONOTONIC is system-wide on Linux, so worker and orchestrator
times compare directly).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CHECK_ORDER: tuple[str, ...] = ("nvml", "overhead", "mps", "besteffort", "memory", "colocation", "burst", "dra")

OK, FAILED, ERROR, SKIPPED = "ok", "failed", "error", "skipped"
STATUSES = (OK, FAILED, ERROR, SKIPPED)


@dataclass(frozen=True)
class Target:
    """A promised figure: `center +- tolerance`, or a bound (`at_most` / `at_least`)."""

    text: str
    center: float | None = None
    tolerance: float = 0.0
    at_most: float | None = None
    at_least: float | None = None

    def met(self, value: float | None) -> bool | None:
        if value is None or math.isnan(value):
            return None
        if self.center is not None and abs(value - self.center) > self.tolerance + 1e-12:
            return False
        if self.at_most is not None and value > self.at_most:
            return False
        if self.at_least is not None and value < self.at_least:
            return False
        return True


# The product's promises (issue / MISSION S3, S4, S6; docs/node-agent.md).
MPS_RATIO = Target("fixed-share 60 %/30 % throughput ratio 2.0 +- 0.2", center=2.0, tolerance=0.2)
BESTEFFORT_RATIO = Target("best-effort: two equal jobs run at about the same rate, ratio 1.0 +- 0.1", center=1.0, tolerance=0.1)
OVERHEAD_PCT = Target("sharing overhead against a native GPU < 4 % (S6)", at_most=4.0)
KEPT_FRACTION = Target("online job keeps >= 95 % of its exclusive throughput (S4)", at_least=0.95)
BURST_RATIO = Target("burst-share 60/30 under contention: GPU time ratio 2.0 +- 0.2 (core / sum of active cores)", center=2.0, tolerance=0.2)
KILL_SECONDS = Target("enforce: processes over gpu-memory killed within 2 s (1 s slow tick + NVML sample)", at_most=2.0)


def count_between(batches: Sequence[float], t0: float, t1: float) -> int:
    """Batches that finished in (t0, t1]."""
    return sum(1 for t in batches if t0 < t <= t1)


def rate_in_window(batches: Sequence[float], t0: float, t1: float, per_batch: int) -> float:
    """Matmuls per second of wall time in (t0, t1], counting stalls (frozen, time-sliced) as time."""
    if t1 <= t0:
        raise ValueError(f"empty window ({t0}, {t1}]")
    return count_between(batches, t0, t1) * per_batch / (t1 - t0)


def steady_rate(batches: Sequence[float], t0: float, t1: float, per_batch: int) -> float | None:
    """Matmuls per second between the first and last batch ends inside (t0, t1]: no edge bias,
    for a job that runs the whole window (overhead, ratios). None with fewer than two batches."""
    inside = [t for t in batches if t0 < t <= t1]
    if len(inside) < 2 or inside[-1] <= inside[0]:
        return None
    return (len(inside) - 1) * per_batch / (inside[-1] - inside[0])


def on_windows(start: float, on: float, off: float, end: float) -> list[tuple[float, float]]:
    """The active phases of a job that works `on` seconds then idles `off` seconds from `start`."""
    if on <= 0 or off < 0:
        raise ValueError("a burst pattern needs on > 0 and off >= 0")
    out: list[tuple[float, float]] = []
    t = start
    while t < end - 1e-9:
        out.append((t, min(t + on, end)))
        t += on + off
    return out


def rate_in_windows(batches: Sequence[float], windows: Iterable[tuple[float, float]], per_batch: int) -> float:
    spans = list(windows)
    total = sum(b - a for a, b in spans)
    if total <= 0:
        raise ValueError("no active time in the windows")
    return sum(count_between(batches, a, b) for a, b in spans) * per_batch / total


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def overhead_pct(native: float | None, shared: float | None) -> float | None:
    """How much slower the shared path is than native, in percent (negative: faster)."""
    r = ratio(shared, native)
    return None if r is None else (1.0 - r) * 100.0


def state_at(transitions: Sequence[tuple[float, bool]], t: float, initial: bool = False) -> bool:
    """The on/off state at time t of a signal given by (time, new state) changes in time order."""
    state = initial
    for when, value in transitions:
        if when > t:
            break
        state = value
    return state


@dataclass(frozen=True)
class Reaction:
    """How long after each trigger a signal went to `value` (None: not within the horizon)."""

    latencies: tuple[float | None, ...]
    already: int  # triggers at which the signal already had the value

    def summary(self) -> dict[str, Any]:
        seen = [x for x in self.latencies if x is not None]
        return {
            "n": len(self.latencies),
            "missed": sum(1 for x in self.latencies if x is None),
            "already": self.already,
            "p50_ms": _ms(percentile(seen, 50)),
            "max_ms": _ms(max(seen) if seen else None),
            "each_ms": [_ms(x) for x in self.latencies],
        }


def reaction(triggers: Iterable[float], transitions: Sequence[tuple[float, bool]], value: bool, horizon: float) -> Reaction:
    """For each trigger time: the delay until the signal changes to `value` (freeze after a burst
    starts, thaw after it ends). A trigger at which the signal already has `value` counts as
    `already`, not as a latency."""
    out: list[float | None] = []
    already = 0
    for t in triggers:
        if state_at(transitions, t) == value:
            already += 1
            continue
        hit = next((when for when, v in transitions if v == value and t <= when <= t + horizon), None)
        out.append(None if hit is None else hit - t)
    return Reaction(tuple(out), already)


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (no interpolation), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 1)


def match_pids_by_memory(expected: Mapping[int, int], observed: Mapping[int, int], min_gap_mib: int = 128) -> dict[int, int]:
    """NVML pid -> local pid, for GPU processes seen from another PID namespace.

    `expected`: local pid -> MiB the worker holds beyond its CUDA context (distinct per worker);
    `observed`: NVML pid -> used MiB of the new processes. Identical workers have identical
    contexts, so sorting both by memory pairs them; the pairing is refused (ValueError) unless the
    counts agree and every step between neighbours is at least `min_gap_mib`."""
    if len(expected) != len(observed):
        raise ValueError(f"{len(expected)} workers started but {len(observed)} new GPU processes appeared")
    exp = sorted(expected.items(), key=lambda kv: kv[1])
    obs = sorted(observed.items(), key=lambda kv: kv[1])
    for (_, lo), (_, hi) in zip(exp, exp[1:]):
        if hi - lo < min_gap_mib:
            raise ValueError("workers must hold memory at least min_gap_mib apart to be told apart")
    for (_, lo), (_, hi) in zip(obs, obs[1:]):
        if hi - lo < min_gap_mib // 2:
            raise ValueError(f"GPU processes use {lo} and {hi} MiB: too close to tell which worker is which")
    return {nvml_pid: local_pid for (nvml_pid, _), (local_pid, _) in zip(obs, exp)}


def parse_pids(text: str) -> list[int]:
    """PIDs from `nvidia-cuda-mps-control` output (`get_server_list`, `get_client_list`)."""
    return [int(tok) for tok in text.split() if tok.isdigit()]


def check_result(status: str, target: Target | None = None, value: float | None = None, **figures: Any) -> dict[str, Any]:
    """One check's entry in the report. With a target, `status` ok becomes failed when the value
    misses it (and stays ok when there is no value to judge only if the caller says so)."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    out: dict[str, Any] = {"status": status}
    if target is not None:
        met = target.met(value)
        out["target"] = target.text
        out["value"] = None if value is None else round(value, 4)
        out["met"] = met
        if status == OK and met is not True:
            out["status"] = FAILED
    out.update(figures)
    return out


def skipped(reason: str, **figures: Any) -> dict[str, Any]:
    return {"status": SKIPPED, "reason": reason, **figures}


def exit_code(checks: Mapping[str, Mapping[str, Any]]) -> int:
    """2 when nothing ran (every check skipped, or none), 1 when any check failed or broke, else 0."""
    statuses = [c.get("status") for c in checks.values()]
    if not statuses or all(s == SKIPPED for s in statuses):
        return 2
    return 1 if any(s in (FAILED, ERROR) for s in statuses) else 0


def summary_lines(checks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One short line per check, for the end of the log (the part a remote tool shows)."""
    lines = []
    for name, c in checks.items():
        status = str(c.get("status"))
        if status == SKIPPED:
            detail = str(c.get("reason", ""))
        elif "target" in c:
            detail = f"value {c.get('value')} (target: {c.get('target')})"
        else:
            detail = str(c.get("error") or c.get("note") or "")
        lines.append(f"{name:<11} {status:<8} {detail}"[:300])
    return lines


def parse_only(value: str) -> list[str]:
    """`--only a,b` -> checks in run order; unknown names are an error that lists the known ones."""
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in wanted if v not in CHECK_ORDER]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECK_ORDER)}")
    return [c for c in CHECK_ORDER if c in wanted]


def parse_pattern(value: str) -> tuple[float, float]:
    """`ON:OFF` seconds of the online job's bursts."""
    try:
        on_s, off_s = (float(x) for x in value.split(":"))
    except ValueError as exc:
        raise ValueError(f"burst pattern {value!r} is not ON:OFF seconds, e.g. 6:4") from exc
    if on_s <= 0 or off_s <= 0:
        raise ValueError("burst pattern needs ON > 0 and OFF > 0")
    return on_s, off_s
