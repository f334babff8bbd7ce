"""`tessera scheduler serve`: run the kube-scheduler extender (wiring only)."""
from __future__ import annotations

import argparse
import functools
import logging
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tessera.model.contract import ENV_POOLS_FILE, EXTENDER_LEASE, EXTENDER_PORT, TESSERA_NAMESPACE
from tessera.model.pools_file import PoolsFileError, load_pools_file
from tessera.model.leader_election import (
    DEFAULT_LEASE_DURATION_S,
    DEFAULT_RENEW_DEADLINE_S,
    DEFAULT_RETRY_PERIOD_S,
    LeaderElectionTiming,
    format_go_duration,
    parse_go_duration,
)
from tessera.httpd.stopsignal import install_stop_handler

if TYPE_CHECKING:
    from tessera.scheduler.leader import LeaderElectionSettings


# What `serve` answers: kube-scheduler's extender verbs (POST, JSON) and the probes (GET).
ENDPOINTS = (
    ("POST", "/filter", "nodes where the pod's GPU request fits"),
    ("POST", "/prioritize", "node scores from the placement policy"),
    ("POST", "/preempt", "keeps the preemption victims that free GPUs the pod fits on (kube-scheduler's preemptVerb)"),
    ("POST", "/bind", "binds the pod, recording its GPU allocation (tessera.dev/allocation)"),
    ("GET", "/healthz", "200 once the cache is in sync (also /readyz, /livez)"),
    ("GET", "/metrics", "Prometheus metrics"),
)


def _endpoint_lines() -> str:
    return "\n".join(f"  {verb:<4} {path:<12} {what}" for verb, path, what in ENDPOINTS)


def register(sub: Any) -> None:
    paths = ", ".join(path for _, path, _ in ENDPOINTS)
    parser: argparse.ArgumentParser = sub.add_parser(
        "scheduler",
        help="run the kube-scheduler extender for fractional GPUs",
        description=f"The kube-scheduler extender for fractional GPUs. Endpoints of `serve`:\n{_endpoint_lines()}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="scheduler_command", required=True, metavar="ACTION")
    serve = actions.add_parser(
        "serve",
        help=f"serve {paths}",
        description="Run the extender in a cluster (in-cluster service account, or --kubeconfig), "
        "or with --simulate against an in-memory cluster built from a node CSV (demo and load tests).\n\n"
        f"Endpoints:\n{_endpoint_lines()}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config, else ~/.kube/config)")
    serve.add_argument("--context", help="kubeconfig context (default: the file's current context)")
    serve.add_argument("--placement", default=None, metavar="POLICY", help="node placement policy (default fragmentation-aware)")
    serve.add_argument("--port", type=int, default=EXTENDER_PORT, help=f"listen port (default {EXTENDER_PORT}; 0 picks a free one)")
    serve.add_argument("--bind-address", default=None, help="listen address (default 0.0.0.0, or 127.0.0.1 with --simulate)")
    serve.add_argument("--simulate", type=Path, metavar="NODES.csv", help="serve an in-memory cluster from an openb-schema node CSV")
    serve.add_argument(
        "--gpu-placement", choices=["binpack", "spread"], help="with --simulate: GPU-level placement label of the simulated pool"
    )
    serve.add_argument(
        "--simulate-pods",
        type=Path,
        metavar="PODS.csv",
        help="with --simulate-fill: openb-schema pod CSV whose GPU pods load the simulated cluster",
    )
    serve.add_argument(
        "--simulate-fill",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="with --simulate: before serving, bind --simulate-pods pods (shuffled, cycled) through the production "
        "binder until this share (0-1) of the GPUs is allocated (default 0: start empty)",
    )
    serve.add_argument("--simulate-seed", type=int, default=42, help="with --simulate-fill: shuffle seed of the pods (default 42)")
    serve.add_argument(
        "--pools-file",
        type=Path,
        default=os.environ.get(ENV_POOLS_FILE) or None,
        metavar="PATH",
        help=f"pools file (the mounted tessera-pools ConfigMap): its entry for a node's pool wins over the node's policy labels, re-read when it changes (default ${ENV_POOLS_FILE}, else labels only)",
    )
    serve.add_argument("--assume-ttl", type=float, default=300.0, help="seconds an annotated but unbound pod keeps its GPUs (default 300)")
    serve.add_argument(
        "--preempt-budget",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="longest /preempt may think, all candidate nodes together; keep it under kube-scheduler's httpTimeout (default 2)",
    )
    election = serve.add_argument_group(
        "leader election",
        "Replicas elect a leader through a coordination.k8s.io/v1 Lease, with kube-scheduler's flags: only the "
        "leader binds; the others keep their caches warm from the watch and pass every request to it.",
    )
    election.add_argument(
        "--leader-elect",
        type=_boolean,
        nargs="?",
        const=True,
        default=None,
        metavar="BOOL",
        help="take part in leader election (default true, as kube-scheduler; false with --simulate, which cannot use it)",
    )
    for flag, default, what in (
        ("lease-duration", DEFAULT_LEASE_DURATION_S, "a standby takes over a lease not renewed for this long"),
        ("renew-deadline", DEFAULT_RENEW_DEADLINE_S, "the leader stops binding when it could not renew for this long"),
        ("retry-period", DEFAULT_RETRY_PERIOD_S, "how often the leader renews and standbys look at the lease"),
    ):
        election.add_argument(
            f"--leader-elect-{flag}", type=_duration, default=default, metavar="DURATION",
            help=f"{what} (Go duration; default {format_go_duration(default)})",
        )
    election.add_argument("--leader-elect-resource-name", default=EXTENDER_LEASE, metavar="NAME", help=f"the Lease's name (default {EXTENDER_LEASE})")
    election.add_argument(
        "--leader-elect-resource-namespace",
        default=None,
        metavar="NAMESPACE",
        help=f"the Lease's namespace (default $POD_NAMESPACE, else {TESSERA_NAMESPACE})",
    )
    election.add_argument(
        "--advertise-address",
        default=None,
        metavar="ADDRESS",
        help="the address other replicas pass requests to while this one leads (default $POD_IP; in a pod, "
        "the Deployment sets it from status.podIP)",
    )
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.set_defaults(handler=_serve)


def _boolean(text: str) -> bool:
    """Go's strconv.ParseBool, which kube-scheduler's boolean flags take (`--leader-elect=false`)."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}: use true or false")


def _duration(text: str) -> float:
    try:
        return parse_go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _election(args: argparse.Namespace) -> LeaderElectionSettings | None | str:
    """The leader-election settings the flags ask for, None when off, or an error message."""
    from tessera.scheduler.leader import LeaderElectionSettings

    enabled = args.leader_elect if args.leader_elect is not None else not args.simulate
    if not enabled:
        return None
    if args.simulate:
        return "--leader-elect needs a Kubernetes API server; --simulate serves an in-memory cluster alone"
    timing = LeaderElectionTiming(args.leader_elect_lease_duration, args.leader_elect_renew_deadline, args.leader_elect_retry_period)
    problems = timing.problems()
    if problems:
        flag = {"leaseDuration": "lease-duration", "renewDeadline": "renew-deadline", "retryPeriod": "retry-period"}
        return "; ".join(f"--leader-elect-{flag[name]}: {message}" for name, message in problems)
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"
    return LeaderElectionSettings(
        namespace=args.leader_elect_resource_namespace or os.environ.get("POD_NAMESPACE") or TESSERA_NAMESPACE,
        identity=identity,
        advertise_host=args.advertise_address or os.environ.get("POD_IP") or None,
        name=args.leader_elect_resource_name,
        timing=timing,
    )


def _serve(args: argparse.Namespace) -> int:
    from tessera.alloc import DEFAULT_POLICY, PlacementPolicy
    from tessera.kube.api import KubeApi, KubeApiError
    from tessera.scheduler.http_server import ServerSettings
    from tessera.scheduler.preemption import PreemptSettings
    from tessera.scheduler.service import ExtenderConfig, ExtenderService
    from tessera.scheduler.state import StateSettings

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        policy = PlacementPolicy.parse(args.placement) if args.placement else DEFAULT_POLICY
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.gpu_placement and not args.simulate:
        print("error: --gpu-placement only applies with --simulate; in a cluster it is the pool's node label", file=sys.stderr)
        return 2
    if (args.simulate_pods or args.simulate_fill) and not args.simulate:
        print("error: --simulate-pods and --simulate-fill only apply with --simulate", file=sys.stderr)
        return 2
    if not 0.0 <= args.simulate_fill <= 1.0:
        print(f"error: --simulate-fill must be a share of the GPUs between 0 and 1, got {args.simulate_fill}", file=sys.stderr)
        return 2
    if bool(args.simulate_pods) != bool(args.simulate_fill):
        print("error: --simulate-fill and --simulate-pods go together: the share to allocate and the pods to allocate it with", file=sys.stderr)
        return 2
    if not args.preempt_budget > 0:
        print(f"error: --preempt-budget must be more than 0 seconds, got {args.preempt_budget}", file=sys.stderr)
        return 2
    if args.pools_file is not None:
        try:
            load_pools_file(Path(args.pools_file))
        except PoolsFileError as exc:
            print(f"error: --pools-file {exc}", file=sys.stderr)
            return 2
    host = args.bind_address or ("127.0.0.1" if args.simulate else "0.0.0.0")
    simulate = args.simulate is not None
    election = _election(args)
    if isinstance(election, str):
        print(f"error: {election}", file=sys.stderr)
        return 2
    if election is not None and election.advertise_host is None:
        print("warning: no --advertise-address (or $POD_IP): while this replica leads, the others cannot pass requests to it", file=sys.stderr)
    api: KubeApi
    pod_sink = None
    prepare: Callable[[Any], None] | None = None
    if simulate:
        from tessera.scheduler.simulate import ensure_pod, simulated_api
        from tessera.sim.trace import TraceError

        try:
            fake = simulated_api(args.simulate, gpu_placement=args.gpu_placement)
            prepare = _simulated_fill(args, fake) if args.simulate_fill else None
        except TraceError as exc:
            for line in exc.problems:
                print(line, file=sys.stderr)
            return 2
        except _FillFailed as exc:
            print(f"error: --simulate-fill: {exc}", file=sys.stderr)
            return 2
        api = fake

        def pod_sink(pod: dict[str, Any]) -> dict[str, Any]:
            return ensure_pod(fake, pod)

    else:
        from tessera.kube.client import ClientSettings, KubernetesClientApi

        try:
            api = KubernetesClientApi.connect(ClientSettings(kubeconfig=args.kubeconfig, context=args.context))
        except KubeApiError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 1
    config = ExtenderConfig(
        policy=policy,
        server=ServerSettings(host=host, port=args.port),
        state=StateSettings(track_host_resources=simulate, assume_ttl_s=args.assume_ttl),
        pools_file=Path(args.pools_file) if args.pools_file else None,
        preempt=PreemptSettings(time_budget_s=args.preempt_budget),
        leader_election=election,
    )
    try:
        service = ExtenderService(api, config, pod_sink=pod_sink)
    except OSError as exc:
        print(f"error: cannot listen on {host}:{args.port}: {exc.strerror}; pick another --port", file=sys.stderr)
        return 1
    try:
        # a filled cluster's first pod list restores every record: give it longer than an empty one
        started = service.start(wait_ready_s=600.0 if prepare else 60.0, prepare=functools.partial(prepare, service) if prepare else None)
    except _FillFailed as exc:
        print(f"error: --simulate-fill: {exc}", file=sys.stderr)
        service.stop()
        return 1
    if not started:
        print("warning: the cache is not in sync yet; /healthz answers 503 until it is", file=sys.stderr)
    from tessera.scheduler.gc_freeze import freeze_survivors

    # the cache just built lives as long as the process: full collections stop walking it
    freeze_survivors()
    nodes, _, gpus, _ = service.state.summary()
    mode = f"simulated cluster from {args.simulate}" if simulate else "Kubernetes API"
    role = f"; leader election on lease {election.namespace}/{election.name} as {election.identity}" if election is not None else ""
    print(f"tessera extender on {service.url} ({mode}: {nodes} nodes, {gpus} GPUs; policy {policy.value}{role})", flush=True)
    stop = threading.Event()
    install_stop_handler(stop)
    while not stop.wait(1.0):
        pass
    service.stop()
    return 0


class _FillFailed(Exception):
    pass


def _simulated_fill(args: argparse.Namespace, fake: Any) -> Callable[[Any], None]:
    """The `prepare` step of `--simulate-fill` (reads the pod CSV now: its errors come first)."""
    from tessera.scheduler.simulate_fill import FillError, cycle, fill, trace_arrivals

    trace = trace_arrivals(args.simulate_pods, args.simulate_seed)
    if not trace:
        raise _FillFailed(f"{args.simulate_pods}: no pod asks for a GPU")

    def load(service: Any) -> None:
        try:
            result = fill(fake, service.state, service.binder, cycle(trace), args.simulate_fill, on_progress=_fill_progress)
        except FillError as exc:
            raise _FillFailed(str(exc)) from None
        print(
            f"simulated fill: {result.bound} pods bound, {result.allocated_gpus:.2f} of {result.capacity_gpus} GPUs "
            f"({100 * result.allocated_share:.1f} %), {result.unplaced} fitted nowhere, in {result.seconds:.1f} s",
            flush=True,
        )

    return load


def _fill_progress(progress: Any) -> None:
    print(progress.line(), file=sys.stderr, flush=True)  # stdout keeps the one summary line
