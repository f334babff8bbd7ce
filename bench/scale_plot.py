"""Draws the scale curve from bench/scale.py's results (one JSON line per run) and sim_scale.py's.

    python bench/scale_plot.py [--results bench/out/scale/results.json] [--figure docs/figures/scale-curve.png]

Four panels against nodes (8 GPUs each): filter+prioritize p50 and p99 with the goals (with as
many candidates as kube-scheduler sends, solid, and with every node a candidate, dashed), the
extender's CPU per probe, binds/s, and resident memory with the straight line through the
smallest and largest size (memory linear in nodes means the middle points sit on it). Every run is a dot, the median per
size a line, so run-to-run noise on the shared VM stays visible. When replay results exist
(bench/out/scale/replay.json) they are printed, not drawn: two points make no curve.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "scale"
GOALS = {5000: 10.0, 10000: 25.0}


def load(path: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def medians(rows: list[dict[str, float]], key: str) -> tuple[list[int], list[float]]:
    sizes = sorted({int(r["nodes"]) for r in rows})
    return sizes, [statistics.median(r[key] for r in rows if int(r["nodes"]) == n) for n in sizes]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=OUT / "results.json")
    parser.add_argument("--figure", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "figures" / "scale-curve.png")
    args = parser.parse_args()
    rows = load(args.results)
    if not rows:
        print(f"{args.results}: no runs", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    lat, cpu, binds, mem = axes[0][0], axes[0][1], axes[1][0], axes[1][1]
    series = (
        ("ks_p50_ms", "p50, kube-scheduler's candidates", "tab:blue", "-"),
        ("ks_p99_ms", "p99, kube-scheduler's candidates", "tab:red", "-"),
        ("p50_ms", "p50, every node a candidate", "tab:blue", "--"),
        ("p99_ms", "p99, every node a candidate", "tab:red", "--"),
    )
    for key, label, color, style in series:
        lat.scatter([r["nodes"] for r in rows], [r[key] for r in rows], s=12, color=color, alpha=0.5)
        lat.plot(*medians(rows, key), color=color, linestyle=style, marker="o", label=label)
    lat.scatter(list(GOALS), list(GOALS.values()), marker="_", s=400, color="black", label="p99 goal")
    lat.set_ylabel("ms per pod (filter + prioritize over HTTP)")
    lat.set_title("extender latency at 90 % of GPUs allocated")
    for key, label, style in (("ks_cpu_ms_per_probe", "kube-scheduler's candidates", "-"), ("cpu_ms_per_probe", "every node a candidate", "--")):
        cpu.scatter([r["nodes"] for r in rows], [r[key] for r in rows], s=12, color="tab:green", alpha=0.5)
        cpu.plot(*medians(rows, key), color="tab:green", linestyle=style, marker="o", label=label)
    cpu.set_ylabel("extender CPU ms per filter + prioritize")
    cpu.set_title("extender CPU (process utime + stime)")
    binds.scatter([r["nodes"] for r in rows], [r["binds_per_s"] for r in rows], s=12, color="tab:purple", alpha=0.5)
    binds.plot(*medians(rows, "binds_per_s"), color="tab:purple", marker="o", label="binds/s, 4 client threads")
    binds.set_ylabel("binds per second")
    binds.set_title("bind throughput")
    sizes, rss = medians(rows, "rss_end_mib")
    mem.scatter([r["nodes"] for r in rows], [r["rss_end_mib"] for r in rows], s=12, color="tab:orange", alpha=0.5)
    mem.plot(sizes, rss, color="tab:orange", marker="o", label="extender process RSS (incl. the simulated API server)")
    if len(sizes) >= 2:
        slope = (rss[-1] - rss[0]) / (sizes[-1] - sizes[0])
        mem.plot([0, sizes[-1]], [rss[0] - slope * sizes[0], rss[-1]], color="grey", linestyle="--",
                 label=f"line through the ends: {1024 * slope:.0f} KiB per node")
    mem.set_ylabel("MiB")
    mem.set_title("resident memory at the end of the run")
    for ax in (lat, cpu, binds, mem):
        ax.set_xlabel("GPU nodes (8 GPUs each)")
        ax.set_xlim(0, max(r["nodes"] for r in rows) * 1.05)
        if ax is lat or ax is cpu:
            ax.set_yscale("log")  # the two candidate counts differ by up to 20x
        else:
            ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    dates = sorted({str(r.get("date", ""))[:10] for r in rows})
    fig.suptitle(f"Tessera extender, `serve --simulate` (openb 8-GPU node shapes, default trace), {len(rows)} runs, {', '.join(dates)}")
    fig.tight_layout()
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.figure, dpi=110)
    print(f"wrote {args.figure}")
    print(markdown(rows))
    replay = args.results.with_name("replay.json")
    if replay.exists():
        for r in load(replay):
            print(f"  replay {r['label']} ({r['order']}): {r['nodes']} nodes, {r['pods']} pods: {r['seconds']:.1f} s wall, "
                  f"{r['cpu_seconds']:.1f} s CPU, peak RSS {r['peak_rss_mib']:.0f} MiB, load {r['load_start']:.1f} -> {r['load_end']:.1f}")
    return 0


def markdown(rows: list[dict[str, float]]) -> str:
    """The table docs/benchmarks.md shows: one line per run."""
    lines = [
        "| nodes (GPUs) | candidates | p50 / p99 / max ms | CPU ms per pod | every node: p50 / p99 / max ms | CPU ms per pod "
        "| binds/s (refused) | RSS after fill / end MiB | fill s | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in sorted(rows, key=lambda r: (r["nodes"], str(r.get("date")))):
        lines.append(
            f"| {int(r['nodes']):,} ({int(r['gpus']):,}) | {int(r['ks_candidates'])} "
            f"| {r['ks_p50_ms']:.1f} / {r['ks_p99_ms']:.1f} / {r['ks_max_ms']:.0f} | {r['ks_cpu_ms_per_probe']:.1f} "
            f"| {r['p50_ms']:.1f} / {r['p99_ms']:.1f} / {r['max_ms']:.0f} | {r['cpu_ms_per_probe']:.1f} "
            f"| {r['binds_per_s']:.0f} ({int(r['binds_refused'])}) | {r['rss_after_fill_mib']:.0f} / {r['rss_end_mib']:.0f} "
            f"| {r.get('fill_s', 0):.0f} | {r['load_start']:.1f} -> {r['load_end']:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
