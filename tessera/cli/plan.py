"""`tessera plan STACK_FILE [--json] [--kubeconfig PATH | --nodes-from FILE]`: what a stack will create,
per pool and in total; on an existing cluster, given its nodes, which nodes join which pool (the
same membership `pulumi preview` shows and patches)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tessera.model import ConfigError, StackConfig, load_stack_file
from tessera.model.membership import Membership, pool_membership
from tessera.model.plan import PoolPlan, Range, StackPlan, plan_stack
from tessera.model.plan_workloads import WorkloadPlan
from tessera.cli.validate import EXIT_INVALID, problem_lines

NODES_DUMP_COMMAND = "kubectl get nodes -o json --show-managed-fields"


class NodesError(Exception):
    """The nodes could not be read; one line for the user."""


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


def _nodes(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """The cluster's Node objects (and where they came from) from --nodes-from or --kubeconfig/--context."""
    from tessera.inspect import SourceError, load_files

    if args.nodes_from:
        try:
            return [dict(n) for n in load_files(args.nodes_from).nodes], f"file {', '.join(args.nodes_from)}"
        except SourceError as exc:
            raise NodesError(str(exc)) from None
    if args.kubeconfig and not Path(args.kubeconfig).expanduser().is_file():
        problem = "is a directory" if Path(args.kubeconfig).expanduser().is_dir() else "no such file"
        raise NodesError(f"--kubeconfig {args.kubeconfig}: {problem}")
    from urllib3.exceptions import HTTPError

    from tessera.kube.api import KubeApiError, TransportError
    from tessera.kube.client import ClientSettings, KubernetesClientApi

    try:
        nodes = KubernetesClientApi.connect(ClientSettings(kubeconfig=args.kubeconfig, context=args.context)).list_nodes()
    except TransportError as exc:  # no HTTP answer: the client names the call and the cause
        raise NodesError(f"cannot reach the cluster to list its nodes ({' '.join(exc.message.split())}); or pass --nodes-from FILE ({NODES_DUMP_COMMAND})") from None
    except KubeApiError as exc:
        raise NodesError(f"cannot list the cluster's nodes ({exc.status}: {' '.join(exc.message.split())}); or pass --nodes-from FILE ({NODES_DUMP_COMMAND})") from None
    except (HTTPError, OSError) as exc:
        raise NodesError(f"cannot reach the cluster to list its nodes ({type(exc).__name__}); or pass --nodes-from FILE ({NODES_DUMP_COMMAND})") from None
    return nodes, "cluster" + (f" (context {args.context})" if args.context else "")


def _membership(cfg: StackConfig, args: argparse.Namespace) -> tuple[Membership, str] | None:
    if not (args.nodes_from or args.kubeconfig or args.context):
        return None
    if not cfg.cluster.is_existing:
        raise NodesError("--kubeconfig, --context and --nodes-from show which existing nodes join which pool; this stack is provider tke, whose pools are TKE node pools")
    nodes, source = _nodes(args)
    return pool_membership(cfg.node_pools, nodes), source


def run(args: argparse.Namespace) -> int:
    if args.nodes_from and (args.kubeconfig or args.context):
        print("error: --kubeconfig/--context read a live cluster; drop them to read a --nodes-from dump", file=sys.stderr)
        return EXIT_INVALID
    try:
        cfg = load_stack_file(args.stack_file)
    except ConfigError as error:
        print("\n".join(problem_lines(args.stack_file, error)), file=sys.stderr)
        return EXIT_INVALID
    try:
        found = _membership(cfg, args)
    except NodesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if found is not None and found[0].problems:
        print("\n".join(problem_lines(args.stack_file, ConfigError(list(found[0].problems)))), file=sys.stderr)
        return EXIT_INVALID
    plan = plan_stack(cfg)
    if args.json:
        document = plan.to_json()
        if found is not None:
            membership = found[0]
            document["poolNodes"] = membership.to_json()
            document["releases"] = [{"pool": r.pool, "node": r.node, "labels": list(r.labels), "taints": r.taints} for r in membership.releases]
            document["notes"] = list(membership.notes)
        print(json.dumps(document, indent=2))
        return 0
    text = format_plan(plan)
    if found is not None:
        text += f"\n\nnodes ({found[1]}):\n" + "\n".join(f"  {line}" for line in found[0].lines())
        text += "".join(f"\n  warning: {note}" for note in found[0].notes)
    print(text)
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
    nodes = parser.add_argument_group("nodes of an existing cluster (which join which pool, as `pulumi preview` shows)")
    nodes.add_argument("--kubeconfig", metavar="PATH", help="list the nodes of this cluster (default: $KUBECONFIG, else ~/.kube/config, with --context)")
    nodes.add_argument("--context", help="kubeconfig context (default: the current context)")
    nodes.add_argument("--nodes-from", action="append", metavar="FILE", help=f"read the nodes from `{NODES_DUMP_COMMAND}` output instead ('-' = stdin)")
    parser.set_defaults(handler=run)
