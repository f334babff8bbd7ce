"""Packing benchmark: the FGD paper's experiment on the openb traces, our policies side by side with
the paper's published numbers, with the spread across seeds and a paired comparison with FGD.

    nice python bench/packing.py                       # the default trace (in bench/traces/openb); seeds 42-51
    nice python bench/packing.py --traces default --seeds 42-44 --policies fragmentation-aware,fgd
    nice python bench/packing.py --trace-dir CLUSTERDATA/cluster-trace-gpu-v2023/csv --traces all --policies fragmentation-aware,fgd --workers 2

The repository ships the GPU node list and the default pod trace (bench/traces/openb); the variant
traces (gpushare*, multigpu*, gpuspec*, cpu*) and the paper's summaries (`paper-results/` beside
the CSVs, optional) come from a checkout of alibaba/clusterdata, passed with --trace-dir.

Prints one table per trace (mean allocated % of capacity at each arrived %, spread across seeds,
and for the first policy against `fgd`: the per-seed difference, its mean, standard deviation and
paired t statistic) and writes `<out>/<trace>.png`, `<out>/<trace>.txt` and `<out>/results.json`
(every run's points). CPU heavy: one replay of the default trace is ~10-30 s on a laptop core;
run with `nice`, and `--workers` replays in parallel processes.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tessera.alloc import PlacementPolicy  # noqa: E402
from tessera.sim.compare import Curve, format_table, mean_curve, plot_curves  # noqa: E402
from tessera.sim.replay import Order, ReplayResult, ReplaySettings, replay  # noqa: E402
from tessera.sim.trace import load_nodes, load_pods  # noqa: E402

TRACES = ROOT / "bench" / "traces" / "openb"
PAPER_COLUMNS = ("90", "95", "98", "100", "110", "120", "130")
COMPARE_AT = (90.0, 95.0, 98.0, 100.0, 110.0, 120.0, 130.0)
# Two-sided 5 % critical values of Student's t by degrees of freedom (paired test over seeds).
T_CRITICAL = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 11: 2.20, 12: 2.18}
ALL_TRACES = (
    "default,gpushare20,gpushare40,gpushare60,gpushare80,gpushare100,multigpu20,multigpu30,multigpu40,multigpu50,"
    "gpuspec05,gpuspec10,gpuspec20,gpuspec25,gpuspec33,cpu0,cpu037,cpu050,cpu072,cpu100,cpu200,cpu235,cpu250,cpu300"
)


def paper_rows(trace_dir: Path) -> dict[str, dict[str, float]]:
    """Mean rows of the paper's summary for the default trace, by policy name."""
    path = trace_dir / "paper-results" / "default_summary_alloc_pct_of_capacity.csv"
    if not path.exists():
        return {}
    rows: dict[str, dict[str, float]] = {}
    with path.open() as handle:
        for row in csv.DictReader(handle):
            if row["stat"] == "mean":
                rows["paper " + row["policy"].split("-", 1)[1]] = {c: float(row[c]) for c in row if c not in ("policy", "stat")}
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


def paired(ours: dict[int, ReplayResult], fgd: dict[int, ReplayResult], name: str) -> str:
    """Per-seed difference ours - fgd at each arrived %, and whether it is beyond seed noise."""
    seeds = sorted(set(ours) & set(fgd))
    lines = [f"{name} - fgd, paired by seed ({len(seeds)} seeds): mean diff, sd of diffs, t, wins/ties/losses"]
    for x in COMPARE_AT:
        diffs = []
        for s in seeds:
            a, b = ours[s].allocated_at(x), fgd[s].allocated_at(x)
            if a is not None and b is not None:
                diffs.append(a - b)
        if len(diffs) < 2:
            continue
        mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
        t = mean / (sd / math.sqrt(len(diffs))) if sd > 0 else math.copysign(math.inf, mean) if mean else 0.0
        crit = T_CRITICAL.get(len(diffs) - 1, 2.0)
        verdict = "beyond seed noise (p<0.05)" if abs(t) > crit else "within seed noise"
        wins = sum(d > 0.005 for d in diffs), sum(abs(d) <= 0.005 for d in diffs), sum(d < -0.005 for d in diffs)
        lines.append(f"  {x:5.0f}%: {mean:+.3f}  sd {sd:.3f}  t {t:+.2f}  {wins[0]}/{wins[1]}/{wins[2]}  {verdict}")
    return "\n".join(lines)


def _run(job: tuple[str, str, str, int]) -> tuple[str, str, int, ReplayResult, float]:
    trace_dir, trace, policy, seed = job
    nodes = load_nodes(Path(trace_dir) / "openb_node_list_gpu_node.csv")
    pods = load_pods(Path(trace_dir) / f"openb_pod_list_{trace}.csv")
    started = time.process_time()
    result = replay(nodes, pods, ReplaySettings(PlacementPolicy(policy), Order.SHUFFLE, 1.3, seed))
    return trace, policy, seed, result, time.process_time() - started


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default="default", help="comma-separated, or 'all' (24 openb workloads, with --trace-dir); default: the shipped default trace")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--policies", default="fragmentation-aware,fgd,binpack,spread")
    parser.add_argument("--trace-dir", default=str(TRACES))
    parser.add_argument("--workers", type=int, default=1, help="replays run in this many processes (default 1)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "packing"))
    args = parser.parse_args()
    trace_dir, out = Path(args.trace_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = parse_seeds(args.seeds)
    policies = [PlacementPolicy.parse(p) for p in args.policies.split(",")]
    traces = (ALL_TRACES if args.traces == "all" else args.traces).split(",")
    jobs = [(str(trace_dir), t, p.value, s) for t in traces for p in policies for s in seeds]
    runs: dict[str, dict[str, dict[int, ReplayResult]]] = {t: {p.value: {} for p in policies} for t in traces}
    seconds: dict[str, list[float]] = {t: [] for t in traces}
    report: dict[str, object] = {"seeds": seeds, "traces": {}}

    def finish(trace: str) -> None:
        curves = [mean_curve(p, [runs[trace][p.value][s] for s in seeds]) for p in policies]
        paper = paper_rows(trace_dir) if trace == "default" else {}
        text = f"## {trace} (mean of seeds {','.join(map(str, seeds))})\n" + side_by_side(curves, paper) + "\n\n" + format_table(curves)
        if PlacementPolicy.FGD in policies and policies[0] is not PlacementPolicy.FGD:
            text += "\n\n" + paired(runs[trace][policies[0].value], runs[trace]["fgd"], policies[0].value)
        print(text + "\n", flush=True)
        (out / f"{trace}.txt").write_text(text + "\n")
        refs = {}
        if "paper FGD" in paper:
            refs["paper FGD (mean of 10 seeds)"] = sorted((float(x), y) for x, y in paper["paper FGD"].items())
        plot_curves(curves, out / f"{trace}.png", title=f"openb {trace}, seeds {args.seeds}", references=refs)
        traced = report["traces"]
        assert isinstance(traced, dict)
        traced[trace] = {
            "replay_cpu_seconds_mean": sum(seconds[trace]) / max(len(seconds[trace]), 1),
            "runs": {p: {str(s): r.to_json() for s, r in by_seed.items()} for p, by_seed in runs[trace].items()},
        }
        (out / "results.json").write_text(json.dumps(report, indent=1))

    def done(result: tuple[str, str, int, ReplayResult, float]) -> None:
        trace, policy, seed, replayed, cpu = result
        runs[trace][policy][seed] = replayed
        seconds[trace].append(cpu)
        print(f"  {trace} {policy} seed {seed}: {replayed.allocated_at(100.0)} % at 100, "
              f"{replayed.allocated_at(130.0)} % at 130 ({cpu:.1f} s CPU)", file=sys.stderr, flush=True)
        if all(len(by_seed) == len(seeds) for by_seed in runs[trace].values()):
            finish(trace)

    if args.workers > 1:
        with multiprocessing.Pool(args.workers) as pool:
            for result in pool.imap_unordered(_run, jobs):
                done(result)
    else:
        for job in jobs:
            done(_run(job))
    return 0


if __name__ == "__main__":
    sys.exit(main())
