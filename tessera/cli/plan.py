"""`tessera plan STACK_FILE [--json]`: what a stack will create, per pool and in total."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tessera.model import ConfigError, load_stack_file
from tessera.model.plan import PoolPlan, Range, StackPlan, plan_stack
from tessera.model.plan_workloads import WorkloadPlan
from tessera.cli.validate import EXIT_INVALID, problem_lines


def _range(r: Range) -> str:
    return f"{r.min}/{r.desired}/{r.max}"


def _pool_lines(pool: PoolPlan) -> list[str]:
    selector = ",".join(f"{k}={v}" for k, v in pool.node_selector.items())
    where = pool.instance_type or f"existing nodes ({selector})"
    lines = [
        f"pool {pool.name} ({pool.kind}) on {where}: {pool.gpus_per_node} x {pool.gpu_model} ({pool.gpu_memory_mib} MiB) per node",
        f"  nodes min/desired/max: {_range(pool.nodes)}    GPUs: {_range(pool.gpus)}",
    ]
    for name, amount in pool.capacity().items():
        lines.append(f"  {name}: {pool.capacity_per_node[name]} per node, {_range(amount)} in the pool")
    lines += [f"  {detail}" for detail in pool.details]
    lines += [f"  schedule {s.name}: {s.cron} ({s.timezone}) -> {s.layout}" for s in pool.schedule]
    lines.append(f"  runs: {', '.join(pool.components)}")
    return lines


def _workload_lines(w: WorkloadPlan) -> list[str]:
    share = ", ".join(f"{amount} {name}" for name, amount in w.per_replica.items()) or "no GPU"
    lines = [
        f"workload {w.namespace}/{w.name} on pool {w.pool} ({w.pool_kind}): {share} per replica",
        f"  replicas {w.min_replicas}..{w.max_replicas}, {w.scaling}",
    ]
    for name, amount in w.at_max.items():
        capacity = w.pool_capacity[name]
        share_of_pool = f" ({100 * amount / capacity:.0f}%)" if capacity else ""
        lines.append(f"  at {w.max_replicas} replicas: {amount} {name} of the pool's {capacity} at maxSize{share_of_pool}")
    lines += [f"  note: {note}" for note in w.notes]
    return lines


def format_plan(plan: StackPlan) -> str:
    where = f"{plan.provider} cluster {plan.cluster_name}" + (f" in {plan.region}" if plan.provider == "tke" and plan.region else "")
    lines = [f"{where}, Kubernetes {plan.kubernetes_version or 'as running'}", ""]
    for pool in plan.pools:
        lines += _pool_lines(pool) + [""]
    lines.append(f"totals (min/desired/max): nodes {_range(plan.nodes)}, GPUs {_range(plan.gpus)}")
    lines += [f"  {model}: {_range(r)} GPUs" for model, r in plan.gpus_by_model().items()]
    lines += [f"  {name}: {_range(r)}" for name, r in plan.capacity().items()]
    lines.append(f"cluster components: {', '.join(plan.cluster_components) or 'none'}")
    for namespace, hard in plan.quotas.items():
        lines.append(f"quota {namespace}: " + ", ".join(f"{k}={v}" for k, v in hard.items()))
    if plan.monitoring:
        lines.append("monitoring:")
        lines += [f"  {line}" for line in plan.monitoring]
    for workload in plan.workloads:
        lines += ["", *_workload_lines(workload)]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_stack_file(args.stack_file)
    except ConfigError as error:
        print("\n".join(problem_lines(args.stack_file, error)), file=sys.stderr)
        return EXIT_INVALID
    plan = plan_stack(cfg)
    print(json.dumps(plan.to_json(), indent=2) if args.json else format_plan(plan))
    return 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "plan",
        help="show the pools, GPUs and capacity a stack creates",
        description="Show what a stack will create: per pool the kind, instance type, GPU model, node and GPU "
        "counts (min/desired/max), shareable capacity and in-cluster components; totals for the stack; per "
        "workload its pool, GPU share, replicas and scaling metric, and its GPU use at maxReplicas against the pool's capacity.",
    )
    parser.add_argument("stack_file", metavar="STACK_FILE", help="e.g. stacks/Pulumi.prod.yaml")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=run)
