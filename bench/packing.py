"""Packing benchmark: the FGD paper's experiment on the openb traces, our policies side by side with
the paper's published numbers.

    nice python bench/packing.py                       # the default trace (in bench/traces/openb); seeds 42-51
    nice python bench/packing.py --traces default --seeds 42-44 --policies fragmentation-aware,fgd
    nice python bench/packing.py --trace-dir CLUSTERDATA/cluster-trace-gpu-v2023/csv --traces gpushare40,multigpu50

The repository ships the GPU node list and the default pod trace (bench/traces/openb); the variant
traces (gpushare*, multigpu*, gpuspec*, cpu*) and the paper's summaries (`paper-results/` beside
the CSVs, optional) come from a checkout of alibaba/clusterdata, passed with --trace-dir.

Prints one table per trace (mean allocated % of capacity at each arrived %) and writes
`<out>/<trace>.png`, `<out>/<trace>.txt` and `<out>/results.json`. CPU heavy: one replay of the
default trace is ~10-30 s on a laptop core; run with `nice`.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tessera.alloc import PlacementPolicy  # noqa: E402
from tessera.sim.compare import Curve, compare, format_table, plot_curves  # noqa: E402
from tessera.sim.replay import Order, ReplayResult, ReplaySettings  # noqa: E402
from tessera.sim.trace import load_nodes, load_pods  # noqa: E402

TRACES = ROOT / "bench" / "traces" / "openb"
PAPER_COLUMNS = ("90", "95", "98", "100", "110", "120", "130")


def paper_rows(trace_dir: Path) -> dict[str, dict[str, float]]:
    """Mean rows of the paper's summary for the default trace, by policy name."""
    path = trace_dir / "paper-results" / "default_summary_alloc_pct_of_capacity.csv"
    if not path.exists():
        return {}
    rows: dict[str, dict[str, float]] = {}
    with path.open() as handle:
        for row in csv.DictReader(handle):
            if row["stat"] == "mean":
                rows["paper " + row["policy"].split("-", 1)[1]] = {c: float(row[c]) for c in PAPER_COLUMNS}
    return rows


def side_by_side(curves: list[Curve], paper: dict[str, dict[str, float]]) -> str:
    head = ["policy"] + [f"{c}%" for c in PAPER_COLUMNS]
    rows = [head]
    for curve in curves:
        rows.append([f"{curve.policy.value} (ours, {curve.runs} seeds)"] + [
            "-" if curve.at(float(c)) is None else f"{curve.at(float(c)):.2f}" for c in PAPER_COLUMNS
        ])
    for name, values in paper.items():
        rows.append([name] + [f"{values[c]:.2f}" for c in PAPER_COLUMNS])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))) for r in rows)


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default="default", help="comma-separated: default (shipped), gpushare40, multigpu50, ... (with --trace-dir)")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--policies", default="fragmentation-aware,fgd,binpack,spread")
    parser.add_argument("--trace-dir", default=str(TRACES))
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "packing"))
    args = parser.parse_args()
    trace_dir, out = Path(args.trace_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = parse_seeds(args.seeds)
    policies = [PlacementPolicy.parse(p) for p in args.policies.split(",")]
    nodes = load_nodes(trace_dir / "openb_node_list_gpu_node.csv")
    report: dict[str, object] = {"seeds": seeds, "traces": {}}
    for trace in args.traces.split(","):
        pods = load_pods(trace_dir / f"openb_pod_list_{trace}.csv")
        timings: list[float] = []
        started = time.monotonic()

        def on_run(policy: PlacementPolicy, seed: int, result: ReplayResult) -> None:
            timings.append(time.monotonic() - started - sum(timings))
            print(f"  {trace} {policy.value} seed {seed}: {result.allocated_at(100.0)} % at 100, "
                  f"{result.allocated_at(130.0)} % at 130 ({timings[-1]:.1f} s)", file=sys.stderr, flush=True)

        curves = compare(nodes, pods, policies, ReplaySettings(order=Order.SHUFFLE, inflate=1.3), seeds, on_run)
        paper = paper_rows(trace_dir) if trace == "default" else {}
        text = f"## {trace} (mean of seeds {seeds[0]}..{seeds[-1]})\n" + side_by_side(curves, paper) + "\n\n" + format_table(curves)
        print(text + "\n", flush=True)
        (out / f"{trace}.txt").write_text(text + "\n")
        plot_curves(curves, out / f"{trace}.png", title=f"openb {trace}, seeds {seeds[0]}..{seeds[-1]}")
        traces = report["traces"]
        assert isinstance(traces, dict)
        traces[trace] = {
            "replay_seconds_mean": sum(timings) / max(len(timings), 1),
            "curves": {c.policy.value: {"points": c.points, "mean_failed_pods": c.mean_failed_pods} for c in curves},
        }
        (out / "results.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
