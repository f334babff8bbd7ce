"""`tessera inspect`: GPU sharing on a cluster, read-only (wiring only; logic in `tessera.inspect`).

Exit 0 with the view on stdout; exit 2 with one `error: ...` line on stderr when the source cannot
be read (bad dump file, unreadable kubeconfig, API server unreachable or refusing) or a --node /
--pool names nothing. Never a traceback for those.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 2


def run(args: argparse.Namespace) -> int:
    from tessera.inspect import FilterError, SourceError, connect_and_load, inspect_objects, load_files, render_json, render_table, select

    if args.from_files and (args.kubeconfig or args.context):
        print("error: --kubeconfig/--context read a live cluster; drop them to inspect a --from dump", file=sys.stderr)
        return EXIT_ERROR
    try:
        objects = load_files(args.from_files) if args.from_files else connect_and_load(args.kubeconfig, args.context)
        inspection = select(inspect_objects(objects), nodes=args.node or (), pools=args.pool or ())
    except (SourceError, FilterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.output == "json":
        sys.stdout.write(render_json(inspection))
    else:
        sys.stdout.write(render_table(inspection, details=args.details))
    return EXIT_OK


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "inspect",
        help="show GPU sharing on a cluster: per-GPU allocations, pools, flagged pods (read-only)",
        description="Show allocated gpu-core and gpu-memory per GPU of every shared node, whole-GPU pools "
        "(nvidia.com/* requested vs allocatable), pool totals, and pods whose reservation is not bound or "
        "names a node or GPU that is gone. Reads a live cluster (get/list nodes and pods) or a "
        "`kubectl get nodes,pods -A -o json` dump. Exit 2 with one error line when the source cannot be read.",
    )
    source = parser.add_argument_group("source (default: the cluster of the current kubeconfig context)")
    source.add_argument(
        "--from",
        dest="from_files",
        action="append",
        metavar="FILE",
        help="read a `kubectl get nodes,pods -A -o json` (or -o yaml) dump instead of a cluster; '-' = stdin; repeatable",
    )
    source.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: in-cluster, else $KUBECONFIG, else ~/.kube/config)")
    source.add_argument("--context", help="kubeconfig context (default: the current context)")
    parser.add_argument("--node", action="append", metavar="NAME", help="only this node (repeatable)")
    parser.add_argument("--pool", action="append", metavar="NAME", help="only nodes of this pool, the tessera.dev/pool label (repeatable)")
    parser.add_argument("-d", "--details", action="store_true", help="list the pods on each GPU and the pending pods")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table", help="table (default) or json (every pod included; schema in docs/operations.md)")
    parser.set_defaults(handler=run)
