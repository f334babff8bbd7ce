"""`tessera sim replay|compare`: the capacity planner (trace replay through the production policy).

Exit codes: 0 done, 2 bad input (unreadable or invalid trace, unknown policy, bad flag). Trace
problems are printed one per line as `file:line: message`, never as a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tessera.alloc import DEFAULT_POLICY, NodeState, PlacementPolicy
from tessera.sim.compare import compare, format_table, plot_curves
from tessera.sim.dra_route import Route
from tessera.sim.progress import ProgressBar
from tessera.sim.replay import MAX_INFLATE, Order, ReplayResult, ReplaySettings, replay
from tessera.sim.trace import TraceError, TracePod, load_nodes, load_pods

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def _policy(text: str) -> PlacementPolicy:
    try:
        return PlacementPolicy.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _policies(text: str) -> list[PlacementPolicy]:
    return [_policy(t.strip()) for t in text.split(",") if t.strip()]


MAX_SEEDS = 1000


def _seeds(text: str) -> list[int]:
    """"42", "42,43" or "42-51"; at most MAX_SEEDS of them."""
    out: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part.strip()[1:]:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise argparse.ArgumentTypeError(f"seed range {part.strip()!r} is empty; write it low-high, e.g. 42-51")
                if hi - lo >= MAX_SEEDS:
                    raise argparse.ArgumentTypeError(f"seed range {part.strip()!r} has more than {MAX_SEEDS} seeds")
                out += list(range(lo, hi + 1))
            elif part.strip():
                out.append(int(part))
            if len(out) > MAX_SEEDS:
                raise argparse.ArgumentTypeError(f"more than {MAX_SEEDS} seeds")
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must look like 42, 42,43 or 42-51, got {text!r}") from None
    if not out:
        raise argparse.ArgumentTypeError("no seeds given; e.g. 42 or 42-51")
    return out


def _inflate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= MAX_INFLATE:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be > 0 and at most {MAX_INFLATE:g} (the paper uses 1.3), got {text}")
    return value


def _load(args: argparse.Namespace) -> tuple[list[NodeState], list[TracePod]] | None:
    """Both trace files, or None after printing every problem (`file:line: message`)."""
    problems: list[str] = []
    nodes: list[NodeState] = []
    pods: list[TracePod] = []
    try:
        nodes = load_nodes(Path(args.nodes))
    except TraceError as exc:
        problems += exc.problems
    try:
        pods = load_pods(Path(args.pods))
    except TraceError as exc:
        problems += exc.problems
    for line in problems:
        print(line, file=sys.stderr)
    return None if problems else (nodes, pods)


def _share(count: int, total: int) -> str:
    return f"{count} ({count * 100 / total:.1f} %)" if total else str(count)


def result_summary(result: ReplayResult, settings: ReplaySettings, pods_file: str, nodes_file: str) -> str:
    """What was replayed, in words: pods arrived, placed and failed, and the share of capacity."""
    sampled = result.pods - result.trace_pods
    origin = f"{result.trace_pods} from the trace" + (
        f" + {sampled} sampled from it to reach {settings.inflate:g}x capacity" if sampled else ""
    )
    lines = [
        f"replayed {pods_file} on {nodes_file}: {result.nodes} GPU nodes, {result.capacity_gpus} GPUs; "
        f"policy {result.policy.value}, {settings.order.value} order, seed {settings.seed}"
        + ("" if settings.route is Route.DEVICE_PLUGIN else f", route {settings.route.value}"),
        f"  arrived {result.pods} pods ({origin}), requesting {result.requested_pct:.2f} % of GPU capacity",
        f"  placed  {_share(result.placed_pods, result.pods)} pods, allocating {result.allocated_pct:.2f} % of GPU capacity",
        f"  failed  {_share(result.failed_pods, result.pods)} pods (fit on no node; not retried)",
    ]
    if result.failed_by_shape:
        worst = sorted(result.failed_by_shape.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{count} asking {shape}" for shape, count in worst[:5])
        lines[-1] += f": {shown}" + (", ..." if len(worst) > 5 else "")
    return "\n".join(lines)


def result_table(result: ReplayResult) -> str:
    lines = [
        "allocated GPU (% of capacity) and failed pods as arrivals reach each % of GPU capacity:",
        f"{'arrived %':>10} {'allocated %':>12} {'failed pods':>12}",
    ]
    for p in result.points:
        lines.append(f"{p.arrived_pct:>10.2f} {p.allocated_pct:>12.2f} {p.failed_pods:>12}")
    return "\n".join(lines)


def _show_progress(args: argparse.Namespace) -> bool:
    return not args.no_progress  # on a terminal a bar, elsewhere plain lines (ProgressBar)


def run_replay(args: argparse.Namespace) -> int:
    loaded = _load(args)
    if loaded is None:
        return EXIT_BAD_INPUT
    nodes, pods = loaded
    settings = ReplaySettings(args.policy, Order(args.order), args.inflate, args.seed, Route(args.route))
    bar = ProgressBar(f"replay {settings.policy.value}") if _show_progress(args) else None
    result = replay(nodes, pods, settings, bar)
    summary = result_summary(result, settings, Path(args.pods).name, Path(args.nodes).name)
    if args.json:
        print(summary, file=sys.stderr)  # stdout stays one JSON document
        print(json.dumps(result.to_json()))
    else:
        print(summary)
        print(result_table(result))
    return EXIT_OK


def run_compare(args: argparse.Namespace) -> int:
    if not args.policies:
        print("error: --policies names no policy; e.g. fgd,binpack", file=sys.stderr)
        return EXIT_BAD_INPUT
    loaded = _load(args)
    if loaded is None:
        return EXIT_BAD_INPUT
    nodes, pods = loaded
    base = ReplaySettings(DEFAULT_POLICY, Order(args.order), args.inflate, args.seeds[0], Route(args.route))
    show = _show_progress(args)

    def on_run(policy: PlacementPolicy, seed: int, result: ReplayResult) -> None:
        if show:
            print(f"{policy.value} seed {seed}: allocated {result.final.allocated_pct:.2f} % at the end", file=sys.stderr)

    curves = compare(nodes, pods, args.policies, base, args.seeds, on_run)
    table = format_table(curves)
    gpus = sum(len(n.gpus) for n in nodes)
    print(f"replayed {len(pods)} pods of {Path(args.pods).name} on {len(nodes)} GPU nodes ({gpus} GPUs) of "
          f"{Path(args.nodes).name}, topped up with sampled pods to {args.inflate:g}x capacity, {args.order} order, "
          f"{len(args.seeds)} seed(s) per policy" + ("" if args.route == Route.DEVICE_PLUGIN.value else f", route {args.route}"))
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
    parser.add_argument("--inflate", type=_inflate, default=1.0,
                        help=f"append pods sampled with replacement until the GPU request is R x capacity (paper: 1.3; at most {MAX_INFLATE:g})")
    parser.add_argument("--route", choices=[r.value for r in Route], default=Route.DEVICE_PLUGIN.value,
                        help="device-plugin (default): Tessera's extender places pods and GPUs; dra: a dra pool, the policy "
                             "picks the node and kube-scheduler's DRA allocator the devices (first fit); dra-default: "
                             "kube-scheduler alone (default scoring, DRA allocation)")
    parser.add_argument("--no-progress", action="store_true", help="no progress on stderr (a bar on a terminal, else a line every 5 s)")


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
