"""`tessera node agent`: argument parsing and wiring only (run by tessera_node/cli.py: `tessera-node` and `tessera node`)."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import get_args
from pathlib import Path

from tessera.model.contract import ENV_POOLS_FILE
from tessera.kube.api import KubeApi, KubeApiError
from tessera.httpd.stopsignal import install_stop_handler
from tessera_node.agent.cgroups import CgroupLocator
from tessera_node.agent.freezer import Freezer, LeaseBook, run_lease_guard, thaw_all
from tessera_node.agent.loop import Agent, AgentDeps
from tessera_node.agent.memory import ProcessKiller, SignalKiller
from tessera_node.agent.metrics import serve_metrics
from tessera_node.agent.mps import FakeProcessRunner, MpsSupervisor, ProcessRunner, SubprocessRunner
from tessera_node.registry import ContainerRegistry, RegistryCorrupt
from tessera.model.contract import SharingPolicy
from tessera.model.pool_policy import DEFAULT_POOL_POLICY, MAX_OFFLINE_RESUME_IDLE_S, MemoryEnforcement
from tessera.model.pools_file import PoolsFileError, load_pools_file
from tessera_node.agent.settings import AgentSettings
from tessera_node.agent.simscript import ProcessScriptError, ScriptedBackend, SimulatedKiller, load_process_script
from tessera_node.demo_paths import DefaultPath, demo_root, resolve
from tessera_node.gpu.backend import GpuBackend, GpuBackendError

_log = logging.getLogger("tessera.agent")
DEFAULTS = AgentSettings(node_name="")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--simulate", metavar="SPEC", help='simulated GPUs instead of NVML, e.g. "H100-80GB:8"')
    parser.add_argument("--simulate-processes", metavar="FILE", type=Path, help="JSON file scripting the simulated GPU processes (re-read when it changes)")
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="this node (default: $NODE_NAME)")
    parser.add_argument(
        "--state-dir", type=Path, default=DefaultPath(DEFAULTS.state_dir),
        help=f"registry and freeze leases (default {DEFAULTS.state_dir}; with --simulate: $TMPDIR/tessera-<node>/agent, where `tessera node device-plugin --fake-kube` keeps it too)",
    )
    parser.add_argument("--cgroup-root", type=Path, default=DEFAULTS.cgroup_root, help=f"cgroup mount (default {DEFAULTS.cgroup_root})")
    parser.add_argument("--proc-root", type=Path, default=DEFAULTS.proc_root, help=f"host /proc (default {DEFAULTS.proc_root})")
    parser.add_argument("--metrics-host", default=DEFAULTS.metrics_host, help=f"metrics listen address (default {DEFAULTS.metrics_host})")
    parser.add_argument("--metrics-port", type=_port, default=DEFAULTS.metrics_port, help=f"metrics port, 0 = any free port (default {DEFAULTS.metrics_port})")
    parser.add_argument("--poll-interval", type=float, default=DEFAULTS.poll_interval_s, help=f"seconds between GPU samples (default {DEFAULTS.poll_interval_s})")
    parser.add_argument("--online-wake-cpu", type=_cpu_percent, default=DEFAULTS.online_wake.cpu_pct, metavar="PERCENT",
                        help="pause offline work when an online container's CPU use over one tick reaches this percent of a core, "
                             f"before NVML sees its GPU work; 0 = NVML alone (default {DEFAULTS.online_wake.cpu_pct:g})")
    parser.add_argument("--lease-ttl", type=float, default=DEFAULTS.lease_ttl_s, help=f"freeze lease lifetime in seconds (default {DEFAULTS.lease_ttl_s})")
    parser.add_argument("--lease-guard", action="store_true", help="run only the lease guard: thaw cgroups whose freeze lease expired")
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster service account)")
    parser.add_argument("--no-kube", action="store_true", help="run without the API server: no events, no pod lookups (default with --simulate)")
    d = DEFAULT_POOL_POLICY
    parser.add_argument("--sharing-policy", choices=get_args(SharingPolicy), help=f"pool policy when neither the pools file nor node labels say (default {d.sharing})")
    parser.add_argument("--memory-enforcement", choices=get_args(MemoryEnforcement), help=f"warn or enforce when neither the pools file nor node labels say (default {d.memory_enforcement})")
    parser.add_argument("--online-offline", action="store_true", help="co-location on when neither the pools file nor node labels say")
    parser.add_argument("--offline-resume-idle", type=_idle_seconds, help=f"seconds of online idleness before offline work resumes, when the pools file does not say (default {d.offline_resume_idle_s:g})")
    parser.add_argument("--pools-file", type=Path, default=os.environ.get(ENV_POOLS_FILE), help=f"pool settings JSON (default ${ENV_POOLS_FILE})")
    parser.add_argument("--no-mps", action="store_true", help="do not run MPS daemons (fixed-share limits then rely on nothing)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def _in_range(text: str, parse: Callable[[str], float], low: float, high: float, what: str) -> float:
    """`text` parsed and within [low, high], else an argparse error that says `what` it must be."""
    try:
        value = parse(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def _port(text: str) -> int:
    return int(_in_range(text, int, 0, 65535, "a TCP port: use 0..65535 (0 picks a free one)"))


def _cpu_percent(text: str) -> float:
    return _in_range(text, float, 0.0, 100.0, "a percent of one core: use 0..100 (0 turns the CPU wake signal off)")


def _idle_seconds(text: str) -> float:
    value = _in_range(text, float, 0.0, MAX_OFFLINE_RESUME_IDLE_S, f"seconds in (0, {MAX_OFFLINE_RESUME_IDLE_S:g}]")
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not seconds in (0, {MAX_OFFLINE_RESUME_IDLE_S:g}]")
    return value


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    base = DEFAULT_POOL_POLICY
    policy = replace(
        base,
        sharing=args.sharing_policy or base.sharing,
        memory_enforcement=args.memory_enforcement or base.memory_enforcement,
        online_offline=bool(args.online_offline) or base.online_offline,
        offline_resume_idle_s=args.offline_resume_idle if args.offline_resume_idle is not None else base.offline_resume_idle_s,
    )
    node_name = args.node_name or ("sim-node" if args.simulate else "")
    state_dir = resolve(args.state_dir, bool(args.simulate), demo_root(node_name) / "agent")
    return AgentSettings(
        node_name=node_name,
        state_dir=state_dir,
        cgroup_root=args.cgroup_root,
        proc_root=args.proc_root,
        poll_interval_s=args.poll_interval,
        online_wake=replace(DEFAULTS.online_wake, cpu_pct=args.online_wake_cpu),
        lease_ttl_s=args.lease_ttl,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        pool_policy=policy,
        mps_enabled=not args.no_mps,
        pools_file=Path(args.pools_file) if args.pools_file else None,
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    settings = settings_from_args(args)
    stop = threading.Event()
    install_stop_handler(stop)
    if args.lease_guard:
        return _run_guard(settings, stop)
    if not settings.node_name:
        print("tessera node agent: no node name; pass --node-name or set NODE_NAME (downward API spec.nodeName)", file=sys.stderr)
        return 2
    problem = _check_input_files(args)
    if problem:
        print(f"tessera node agent: {problem}", file=sys.stderr)
        return 2
    try:
        agent = _build_agent(args, settings)
    except (GpuBackendError, KubeApiError, ValueError, RegistryCorrupt) as exc:
        print(f"tessera node agent: {exc}", file=sys.stderr)
        return 2
    try:
        thawed = agent.start()
    except (GpuBackendError, RegistryCorrupt) as exc:
        print(f"tessera node agent: cannot start: {exc}", file=sys.stderr)
        return 2
    try:
        server, _thread, port = serve_metrics(agent.view.get, settings.metrics_host, settings.metrics_port)
    except OSError as exc:
        agent.shutdown()
        print(f"tessera node agent: cannot listen on {settings.metrics_host}:{settings.metrics_port}: {exc}; pick another --metrics-port", file=sys.stderr)
        return 2
    print(f"tessera node agent ready on {settings.node_name}: thawed {len(thawed)} leftover cgroup(s); metrics on http://{settings.metrics_host}:{port}/metrics", file=sys.stderr, flush=True)
    try:
        agent.run(stop)
    finally:
        thawed = agent.shutdown()
        server.stop(drain_s=1.0)
        print(f"tessera node agent stopped: thawed {len(thawed)} cgroup(s)", file=sys.stderr, flush=True)
    return 0


def _check_input_files(args: argparse.Namespace) -> str | None:
    """Files named on the command line must be usable at start: a wrong path is a mistake to
    report, not a reason to run on defaults (both are re-read while running, and a bad version
    then keeps the last good one)."""
    if args.simulate_processes is not None:
        if not args.simulate:
            return "--simulate-processes needs --simulate (it scripts simulated GPUs)"
        try:
            load_process_script(args.simulate_processes)
        except ProcessScriptError as exc:
            return f"--simulate-processes {exc}"
    if args.pools_file:
        try:
            load_pools_file(Path(args.pools_file))
        except PoolsFileError as exc:
            return f"--pools-file {exc}"
    return None


def _run_guard(settings: AgentSettings, stop: threading.Event) -> int:
    locator = CgroupLocator.detect(settings.cgroup_root, settings.proc_root)
    freezer = Freezer(locator.version)
    book = LeaseBook(settings.state_dir)
    print(f"tessera lease guard watching {book.path}", file=sys.stderr, flush=True)
    run_lease_guard(book, freezer, settings.lease_guard_interval_s, stop)
    # Stopping the guard means the pod is going away: leave nothing frozen behind.
    thaw_all(book, freezer)
    return 0


def _build_agent(args: argparse.Namespace, settings: AgentSettings) -> Agent:
    backend: GpuBackend
    killer: ProcessKiller
    runner: ProcessRunner
    if args.simulate:
        from tessera_node.gpu.simulated import SimulatedBackend

        sim = SimulatedBackend.from_spec(args.simulate, node_seed=settings.node_name)
        backend = ScriptedBackend(sim, args.simulate_processes) if args.simulate_processes else sim
        killer = SimulatedKiller(sim)
        runner = FakeProcessRunner()
    else:
        from tessera_node.gpu.nvml import NvmlBackend

        backend = NvmlBackend()
        killer = SignalKiller()
        runner = SubprocessRunner()
    kube: KubeApi | None = None
    if not args.no_kube and (args.kubeconfig or not args.simulate):
        from tessera.kube.client import ClientSettings, KubernetesClientApi

        kube = KubernetesClientApi.connect(ClientSettings(kubeconfig=args.kubeconfig))
    locator = CgroupLocator.detect(settings.cgroup_root, settings.proc_root)
    deps = AgentDeps(
        backend=backend,
        registry=ContainerRegistry(settings.state_dir),
        locator=locator,
        killer=killer,
        kube=kube,
        # simulated MPS daemons keep their (empty) pipe dirs under the state dir, not /run
        mps=MpsSupervisor(runner, settings.state_dir / "mps" if args.simulate else settings.mps_root) if settings.mps_enabled else None,
        monotonic=time.monotonic,
        wall=time.time,
    )
    agent = Agent(settings, deps)
    if kube is None and (args.sharing_policy or args.memory_enforcement or args.online_offline or args.offline_resume_idle is not None):
        agent.node_policy = settings.pool_policy  # no node labels to read: the flags are the pool
    return agent
