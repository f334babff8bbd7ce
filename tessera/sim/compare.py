"""Comparing policies: replays over seeds, mean curves, a text table and a PNG plot."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tessera.alloc import NodeState, PlacementPolicy
from tessera.sim.replay import ReplayResult, ReplaySettings, replay
from tessera.sim.trace import TracePod

TABLE_COLUMNS_PCT = (50.0, 80.0, 90.0, 95.0, 98.0, 100.0, 110.0, 120.0, 130.0)
SPREAD_COLUMNS_PCT = (90.0, 95.0, 100.0, 130.0)


@dataclass(frozen=True)
class Spread:
    """How the runs of one policy differ at one arrived %: sample standard deviation, range."""

    sd: float
    low: float
    high: float


@dataclass(frozen=True)
class Curve:
    """Mean allocated % at each arrived % over the runs of one policy, and the spread."""

    policy: PlacementPolicy
    runs: int
    points: tuple[tuple[float, float], ...]  # (arrived %, mean allocated %)
    mean_failed_pods: float
    spreads: tuple[Spread, ...] = ()  # one per point when there are runs; sd 0 for a single run

    def at(self, arrived_pct: float) -> float | None:
        for x, y in self.points:
            if abs(x - arrived_pct) < 1e-9:
                return y
        return None

    def spread_at(self, arrived_pct: float) -> Spread | None:
        for (x, _), spread in zip(self.points, self.spreads):
            if abs(x - arrived_pct) < 1e-9:
                return spread
        return None


def mean_curve(policy: PlacementPolicy, results: Sequence[ReplayResult]) -> Curve:
    """Average the threshold points the runs share (the final point of each run is not shared)."""
    shared: dict[float, list[float]] = {}
    for r in results:
        for p in r.points[:-1]:
            shared.setdefault(p.arrived_pct, []).append(p.allocated_pct)
    kept = [(x, ys) for x, ys in sorted(shared.items()) if len(ys) == len(results)]
    points = tuple((x, sum(ys) / len(ys)) for x, ys in kept)
    spreads = tuple(Spread(statistics.stdev(ys) if len(ys) > 1 else 0.0, min(ys), max(ys)) for _, ys in kept)
    failed = sum(r.failed_pods for r in results) / max(len(results), 1)
    return Curve(policy, len(results), points, failed, spreads)


def compare(
    nodes: Sequence[NodeState],
    pods: Sequence[TracePod],
    policies: Sequence[PlacementPolicy],
    base: ReplaySettings,
    seeds: Sequence[int],
    on_run: Callable[[PlacementPolicy, int, ReplayResult], None] | None = None,
) -> list[Curve]:
    curves = []
    for policy in policies:
        results = []
        for seed in seeds:
            settings = ReplaySettings(policy, base.order, base.inflate, seed, base.route)
            result = replay(nodes, pods, settings)
            results.append(result)
            if on_run is not None:
                on_run(policy, seed, result)
        curves.append(mean_curve(policy, results))
    return curves


def format_table(curves: Sequence[Curve], columns: Sequence[float] = TABLE_COLUMNS_PCT) -> str:
    shown = [c for c in columns if any(curve.at(c) is not None for curve in curves)]
    head = ["policy"] + [f"{c:g}%" for c in shown] + ["failed pods"]
    rows = [head]
    for curve in curves:
        cells = [curve.policy.value]
        for c in shown:
            y = curve.at(c)
            cells.append("-" if y is None else f"{y:.2f}")
        cells.append(f"{curve.mean_failed_pods:.0f}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    text = "allocated GPU (% of capacity) at arrived GPU request (% of capacity)\n" + "\n".join(lines)
    if any(c.runs > 1 for c in curves):
        text += "\n\n" + format_spread(curves)
    return text


def format_spread(curves: Sequence[Curve], columns: Sequence[float] = SPREAD_COLUMNS_PCT) -> str:
    """Seed-to-seed spread: standard deviation and min..max of allocated % per arrived %."""
    shown = [c for c in columns if any(curve.spread_at(c) is not None for curve in curves)]
    rows = [["policy (runs)"] + [f"{c:g}%: sd  min..max" for c in shown]]
    for curve in curves:
        cells = [f"{curve.policy.value} ({curve.runs})"]
        for c in shown:
            s = curve.spread_at(c)
            cells.append("-" if s is None else f"{s.sd:.2f}  {s.low:.2f}..{s.high:.2f}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))) for r in rows]
    return "spread across seeds\n" + "\n".join(lines)


def plot_curves(
    curves: Sequence[Curve], path: Path, title: str = "", references: Mapping[str, Sequence[tuple[float, float]]] | None = None
) -> None:
    """Allocated vs arrived, one line per policy, with the ideal y = x for reference;
    `references`: other published curves by label (dashed), e.g. the paper's FGD."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (full, zoom) = plt.subplots(1, 2, figsize=(11, 4.5))
    for axis in (full, zoom):
        top = max((x for c in curves for x, _ in c.points), default=100.0)
        axis.plot([0, top], [0, top], color="0.8", linestyle=":", label="ideal")
        for curve in curves:
            (line,) = axis.plot([x for x, _ in curve.points], [y for _, y in curve.points], marker=".", label=curve.policy.value)
            if axis is zoom and curve.runs > 1 and curve.spreads:
                axis.fill_between([x for x, _ in curve.points], [s.low for s in curve.spreads], [s.high for s in curve.spreads],
                                  color=line.get_color(), alpha=0.15, linewidth=0)
        for label, ref in (references or {}).items():
            axis.plot([x for x, _ in ref], [y for _, y in ref], linestyle="--", color="0.35", label=label)
        axis.set_xlabel("arrived GPU request (% of capacity)")
        axis.set_ylabel("allocated GPU (% of capacity)")
        axis.grid(alpha=0.3)
    zoom.set_xlim(94, max((x for c in curves for x, _ in c.points), default=130.0) + 1)
    ys = [y for c in curves for x, y in c.points if x >= 95]
    ys += [v for c in curves for (x, _), s in zip(c.points, c.spreads) if x >= 95 for v in (s.low, s.high)]
    if ys:
        zoom.set_ylim(min(ys) - 0.2, max(ys) + 0.2)
    zoom.set_title("at high load" + (" (shaded: min..max over seeds)" if any(c.runs > 1 for c in curves) else ""))
    full.set_title(title or "allocation vs arrival")
    full.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
