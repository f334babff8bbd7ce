"""`tessera repartition apply|reconcile`: switch a pool's nodes to a scheduled layout (wiring only).

Run by the CronJobs `tessera render` writes (`--plan` is the mounted plan ConfigMap); also usable
by hand with `--kubeconfig` and `--dry-run` to see which nodes a switch would touch.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from tessera.kube.api import KubeApi, KubeApiError
from tessera.repartition import ApplyReport, PoolPlan, RolloutSettings, active_layout, apply_layout, load_plan


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "repartition", help="switch a pool's nodes to a scheduled layout (MIG profile, time-slicing replicas, shares per GPU)"
    )
    actions = parser.add_subparsers(dest="repartition_command", required=True, metavar="ACTION")
    apply = actions.add_parser("apply", help="put every node of the pool on one layout of its schedule")
    apply.add_argument("--layout-index", type=int, required=True, help="index of the entry in the pool's `repartition` list")
    reconcile = actions.add_parser("reconcile", help="put the pool's nodes on the layout whose schedule fired last")
    reconcile.add_argument("--new-nodes-only", action="store_true", help="only nodes that never got a layout (joined since the last switch)")
    for action in (apply, reconcile):
        action.add_argument("--plan", type=Path, required=True, help="re-partitioning plan (JSON, rendered into the tessera-repartition ConfigMap)")
        action.add_argument("--pool", required=True, help="pool name")
        action.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster service account, else ~/.kube/config)")
        action.add_argument("--dry-run", action="store_true", help="print the nodes that would change; change nothing")
        action.add_argument("--idle-timeout", type=float, default=RolloutSettings.idle_timeout_s, help="MIG pools: seconds to wait for a node's GPU pods to finish")
        action.add_argument("--reconfigure-timeout", type=float, default=RolloutSettings.reconfigure_timeout_s, help="MIG pools: seconds to wait for mig-manager per node")
    apply.set_defaults(handler=_apply)
    reconcile.set_defaults(handler=_reconcile)


def _plan(args: argparse.Namespace) -> PoolPlan | None:
    try:
        return load_plan(args.plan.read_text(encoding="utf-8"), args.pool)
    except OSError as exc:
        print(f"error: cannot read plan {args.plan}: {exc.strerror}", file=sys.stderr)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
    except (ValueError, TypeError) as exc:
        print(f"error: plan {args.plan} is malformed ({exc}); re-render it with `tessera render`", file=sys.stderr)
    return None


def _connect(args: argparse.Namespace) -> KubeApi:
    from tessera.kube.client import ClientSettings, KubernetesClientApi

    api: KubeApi = KubernetesClientApi.connect(ClientSettings(kubeconfig=args.kubeconfig))
    return api


def _run(args: argparse.Namespace, plan: PoolPlan, index: int, *, new_nodes_only: bool) -> int:
    settings = RolloutSettings(idle_timeout_s=args.idle_timeout, reconfigure_timeout_s=args.reconfigure_timeout)
    try:
        api = _connect(args)
        report = apply_layout(
            api, plan, index, settings=settings, clock=time.monotonic, sleep=time.sleep, new_nodes_only=new_nodes_only, dry_run=args.dry_run
        )
    except KubeApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _print(report, plan, index, dry_run=args.dry_run)
    return 0 if report.ok else 1


def _print(report: ApplyReport, plan: PoolPlan, index: int, *, dry_run: bool) -> None:
    layout = plan.layout(index)
    title = f"pool {plan.pool}: layout {index}" + (f" ({layout.name})" if layout.name else "")
    print(f"{title}{' [dry run]' if dry_run else ''}")
    labels = ", ".join(f"{k}={v}" for k, v in sorted(layout.labels.items()))
    for node in report.changed:
        print(f"  {'would relabel' if dry_run else 'relabelled'} {node}: {labels}")
    for node in report.unchanged:
        print(f"  unchanged {node}")
    for node, reason in report.failed.items():
        print(f"  FAILED {node}: {reason}", file=sys.stderr)


def _apply(args: argparse.Namespace) -> int:
    plan = _plan(args)
    if plan is None:
        return 2
    try:
        plan.layout(args.layout_index)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    return _run(args, plan, args.layout_index, new_nodes_only=False)


def _reconcile(args: argparse.Namespace) -> int:
    plan = _plan(args)
    if plan is None:
        return 2
    active = active_layout(plan, dt.datetime.now(dt.timezone.utc))
    if active is None:
        print(f"pool {plan.pool}: no schedule fired in the last 8 days; nothing to reconcile")
        return 0
    return _run(args, plan, active.index, new_nodes_only=args.new_nodes_only)
