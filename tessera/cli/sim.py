"""`tessera sim replay|compare`: the capacity planner (trace replay through the production policy).

Exit codes: 0 done, 2 bad input (unreadable trace, unknown policy); messages, never tracebacks.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tessera.alloc import DEFAULT_POLICY, PlacementPolicy
from tessera.sim.compare import compare, format_table, plot_curves
from tessera.sim.progress import ProgressBar
from tessera.sim.replay import Order, ReplayResult, ReplaySettings, replay
from tessera.sim.trace import TraceError, load_nodes, load_pods

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def _policy(text: str) -> PlacementPolicy:
    try:
        return PlacementPolicy.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _policies(text: str) -> list[PlacementPolicy]:
    return [_policy(t.strip()) for t in text.split(",") if t.strip()]


def _seeds(text: str) -> list[int]:
    """"42", "42,43" or "42-51"."""
    out: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part.strip()[1:]:
                lo, hi = part.split("-", 1)
                out += list(range(int(lo), int(hi) + 1))
            elif part.strip():
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must look like 42, 42,43 or 42-51, got {text!r}") from None
    return out


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def result_table(result: ReplayResult) -> str:
    lines = [
        f"policy {result.policy.value}: {result.pods} pods, {result.failed_pods} failed, capacity {result.capacity_gpus} GPUs",
        f"{'arrived %':>10} {'allocated %':>12} {'failed pods':>12}",
    ]
    for p in result.points:
        lines.append(f"{p.arrived_pct:>10.2f} {p.allocated_pct:>12.2f} {p.failed_pods:>12}")
    return "\n".join(lines)


def _show_progress(args: argparse.Namespace) -> bool:
    return not args.no_progress and sys.stderr.isatty()


def run_replay(args: argparse.Namespace) -> int:
    try:
        nodes, pods = load_nodes(Path(args.nodes)), load_pods(Path(args.pods))
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    settings = ReplaySettings(args.policy, Order(args.order), args.inflate, args.seed)
    bar = ProgressBar(f"replay {settings.policy.value}") if _show_progress(args) else None
    result = replay(nodes, pods, settings, bar)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(result_table(result))
    return EXIT_OK


def run_compare(args: argparse.Namespace) -> int:
    try:
        nodes, pods = load_nodes(Path(args.nodes)), load_pods(Path(args.pods))
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    base = ReplaySettings(DEFAULT_POLICY, Order(args.order), args.inflate, args.seeds[0])
    show = _show_progress(args)

    def on_run(policy: PlacementPolicy, seed: int, result: ReplayResult) -> None:
        if show:
            print(f"{policy.value} seed {seed}: allocated {result.final.allocated_pct:.2f} % at the end", file=sys.stderr)

    curves = compare(nodes, pods, args.policies, base, args.seeds, on_run)
    table = format_table(curves)
    print(table)
    if args.json:
        print(json.dumps({c.policy.value: [{"arrived_pct": x, "allocated_pct": y} for x, y in c.points] for c in curves}))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.txt").write_text(table + "\n")
    plot_curves(curves, out / "compare.png", title=f"{Path(args.pods).name}, seeds {args.seeds[0]}..{args.seeds[-1]}")
    print(f"wrote {out / 'compare.txt'} and {out / 'compare.png'}")
    return EXIT_OK


def _trace_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", required=True, help="node CSV: sn,cpu_milli,memory_mib,gpu,model[,gpu_mem_mib]")
    parser.add_argument("--pods", required=True, help="pod CSV: name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...,gpu_mem_mib]")
    parser.add_argument("--order", choices=[o.value for o in Order], default=Order.CREATION.value,
                        help="arrival order: creation time, or the paper's sort-by-name + seeded shuffle (default creation)")
    parser.add_argument("--inflate", type=_positive, default=1.0,
                        help="append pods sampled with replacement until the GPU request is R x capacity (paper: 1.3)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "sim", help="capacity planner: replay a workload trace through the production placement policy",
        description="Replay a GPU workload trace (openb CSV schema) against a cluster layout.",
    )
    verbs = parser.add_subparsers(dest="sim_command", required=True, metavar="VERB")
    rep = verbs.add_parser("replay", help="replay one trace with one policy",
                           description="Pods arrive one at a time, are never deleted, and fail if they fit nowhere.")
    _trace_args(rep)
    rep.add_argument("--policy", type=_policy, default=DEFAULT_POLICY,
                     help=f"node policy (default {DEFAULT_POLICY.value}): " + ", ".join(p.value for p in PlacementPolicy))
    rep.add_argument("--seed", type=int, default=42, help="shuffle, inflation and tie-ranking seed (default 42)")
    rep.add_argument("--json", action="store_true",
                     help='print {"capacity_gpus": G, "points": [{"arrived_pct", "allocated_pct", "failed_pods"}, ...]}')
    rep.set_defaults(handler=run_replay)
    cmp_ = verbs.add_parser("compare", help="replay several policies over seeds; write a table and a PNG plot")
    _trace_args(cmp_)
    cmp_.add_argument("--policies", type=_policies,
                      default=[PlacementPolicy.FRAGMENTATION_AWARE, PlacementPolicy.FGD, PlacementPolicy.BINPACK, PlacementPolicy.SPREAD],
                      help="comma-separated policies (default fragmentation-aware,fgd,binpack,spread)")
    cmp_.add_argument("--seeds", type=_seeds, default=[42], help="seeds: 42, 42,43 or 42-51 (default 42)")
    cmp_.add_argument("--out", default="sim-out", help="folder for compare.txt and compare.png (default sim-out)")
    cmp_.add_argument("--json", action="store_true", help="also print the mean curves as JSON")
    cmp_.set_defaults(handler=run_compare)


def main(argv: Sequence[str]) -> int:
    """For tests and `python -m`: parse `sim ...` arguments alone."""
    root = argparse.ArgumentParser(prog="tessera")
    register(root.add_subparsers(dest="command", required=True))
    args = root.parse_args(list(argv))
    code: int = args.handler(args)
    return code
