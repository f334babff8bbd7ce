"""`tessera node device-plugin`: argument parsing and wiring only (run by tessera_node/cli.py: `tessera-node` and `tessera node`).

Prints one line to stdout once kubelet accepted the registration (`ready: serving ...`), logs to
stderr. Exit 2 for input that cannot work (a flag, the pools file, the state dir), with the path.
With `--fake-kube` (a demo or test without a cluster) every path defaults under the temp
directory (`$TMPDIR/tessera-<node>/...`) instead of kubelet's and the agent's directories under
/var/lib, so it runs as a normal user.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tessera.model.contract import ENV_POOLS_FILE, LABEL_POOL
from tessera.httpd.stopsignal import install_stop_handler
from tessera.kube.api import KubeApi, KubeApiError
from tessera.model.pools_file import PoolsFileError, load_pools_file
from tessera_node.registry import ContainerRegistry, RegistryCorrupt
from tessera_node.deviceplugin.core import AllocateSettings
from tessera_node.deviceplugin.eviction import EvictionSettings
from tessera_node.demo_paths import DefaultPath, demo_root, resolve
from tessera_node.deviceplugin.plugin import DevicePlugin, DevicePluginSettings, Ready
from tessera_node.deviceplugin.metrics import serve_metrics
from tessera_node.gpu import open_backend
from tessera_node.gpu.backend import GpuBackendError
from tessera_node.gpu.spec import SpecError

if TYPE_CHECKING:
    from tessera_node.testing.kubelet_emulator import KubeletEmulator

DEFAULTS = DevicePluginSettings(node_name="")
ALLOCATE_DEFAULTS = AllocateSettings()
EVICTION_DEFAULTS = EvictionSettings()
FAKE_POOL = "simulated"  # the pool of the node `--fake-kube` holds, so a pools file can name it
# The node agent serves 9500 in the same pod (tessera.manifests.node); dcgm-exporter 9400 on the node.
DEFAULT_METRICS_PORT = 9501


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0-65535; 0 = any free port)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--simulate", metavar="SPEC", help='simulated GPUs instead of NVML, e.g. "H100-80GB:8" or "T4:1,A10:2"')
    demo = "; with --fake-kube: under $TMPDIR/tessera-<node>/"
    parser.add_argument(
        "--device-plugin-dir", type=Path, default=DefaultPath(DEFAULTS.device_plugin_dir),
        help=f"kubelet's device plugin directory, kubelet.sock inside (default {DEFAULTS.device_plugin_dir}{demo}device-plugins)",
    )
    parser.add_argument(
        "--pod-resources-socket", type=Path, default=DefaultPath(DEFAULTS.pod_resources_socket),
        help=f"kubelet's PodResources socket (default {DEFAULTS.pod_resources_socket}{demo}pod-resources/kubelet.sock)",
    )
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="this node (default: $NODE_NAME; with --simulate and --fake-kube: sim-node)")
    parser.add_argument(
        "--state-dir", type=Path, default=DefaultPath(DEFAULTS.state_dir),
        help=f"container registry shared with the node agent (default {DEFAULTS.state_dir}{demo}agent)",
    )
    parser.add_argument("--mps-dir", default=ALLOCATE_DEFAULTS.mps_pipe_host_dir, help=f"host directory of MPS pipes, mounted into fixed-share containers (default {ALLOCATE_DEFAULTS.mps_pipe_host_dir})")
    parser.add_argument("--mps-shm-dir", default=None, help="host tmpfs mounted on /dev/shm of fixed-share containers (default: none)")
    parser.add_argument(
        "--pools-file", type=Path, default=os.environ.get(ENV_POOLS_FILE) or None,
        help=f"pools file (the mounted tessera-pools ConfigMap); its entry for the node's pool wins over the node's policy labels, re-read when it changes (default: ${ENV_POOLS_FILE}, else labels only)",
    )
    parser.add_argument(
        "--evict-on-unhealthy", action=argparse.BooleanOptionalAction, default=EVICTION_DEFAULTS.enabled,
        help="evict (Eviction API, PodDisruptionBudgets respected) the pods whose allocation is on a GPU that became unhealthy, so they are rescheduled (default on)",
    )
    parser.add_argument("--metrics-host", default="0.0.0.0", help="metrics listen address (default 0.0.0.0)")
    parser.add_argument("--metrics-port", type=_port, default=DEFAULT_METRICS_PORT, help=f"port of /metrics (registration, GPU health, container starts); 0 = any free port (default {DEFAULT_METRICS_PORT})")
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster service account)")
    parser.add_argument(
        "--fake-kube", action="store_true",
        help=f"use an in-memory API server holding only this node, in pool {FAKE_POOL!r}, and default every path under the temp directory (demos and tests)",
    )
    parser.add_argument(
        "--kubelet-emulator", action="store_true",
        help="with --fake-kube: also run kubelet's side in this process (device plugin registration and the PodResources "
        "socket, as kubelet 1.30 serves them), so the demo registers and prints ready: with no kubelet at all",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def _kube(args: argparse.Namespace, node_name: str) -> KubeApi:
    if args.fake_kube:
        from tessera.kube.fake import FakeKubeApi

        fake = FakeKubeApi()
        fake.create_node({"metadata": {"name": node_name, "labels": {LABEL_POOL: FAKE_POOL}}})
        return fake
    from tessera.kube.client import ClientSettings, KubernetesClientApi

    return KubernetesClientApi.connect(ClientSettings(kubeconfig=args.kubeconfig))


def _paths(args: argparse.Namespace, node_name: str) -> tuple[Path, Path, Path]:
    """(device plugin dir, PodResources socket, state dir): as given, else kubelet's and the
    agent's defaults, or with `--fake-kube` this node's directory under the temp directory."""
    root = demo_root(node_name)
    return (
        resolve(args.device_plugin_dir, args.fake_kube, root / "device-plugins"),
        resolve(args.pod_resources_socket, args.fake_kube, root / "pod-resources" / "kubelet.sock"),
        resolve(args.state_dir, args.fake_kube, root / "agent"),
    )


def _print_ready(ready: Ready) -> None:
    print(ready.line(), flush=True)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.kubelet_emulator and not args.fake_kube:
        print("error: --kubelet-emulator stands in for kubelet in a demo; it needs --fake-kube", file=sys.stderr)
        return 2
    node_name = args.node_name or ("sim-node" if args.simulate and args.fake_kube else "")
    if not node_name:
        print("error: no node name; pass --node-name or set NODE_NAME (downward API spec.nodeName)", file=sys.stderr)
        return 2
    device_plugin_dir, pod_resources_socket, state_dir = _paths(args, node_name)
    if args.pools_file is not None:
        try:
            load_pools_file(args.pools_file)
        except PoolsFileError as exc:
            print(f"error: --pools-file {exc}", file=sys.stderr)
            return 2
    try:
        registry = ContainerRegistry(state_dir)
        registry.snapshot()
    except OSError as exc:
        hint = "" if args.fake_kube else " (on a node the DaemonSet mounts it; for a demo add --fake-kube or pass --state-dir)"
        print(f"error: --state-dir {state_dir}: {exc.strerror or exc}{hint}", file=sys.stderr)
        return 2
    except RegistryCorrupt as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        backend = open_backend(args.simulate, node_seed=node_name)
        kube = _kube(args, node_name)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KubeApiError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    settings = replace(
        DEFAULTS,
        node_name=node_name,
        device_plugin_dir=device_plugin_dir,
        pod_resources_socket=pod_resources_socket,
        state_dir=state_dir,
        pools_file=args.pools_file,
        eviction=replace(EVICTION_DEFAULTS, enabled=args.evict_on_unhealthy),
        allocate=replace(ALLOCATE_DEFAULTS, mps_pipe_host_dir=args.mps_dir, mps_shm_host_dir=args.mps_shm_dir),
    )
    stop = threading.Event()
    install_stop_handler(stop)
    plugin = DevicePlugin(settings, backend, kube, registry, on_ready=_print_ready)
    try:
        server, _thread, port = serve_metrics(plugin.metrics_view, args.metrics_host, args.metrics_port)
    except OSError as exc:
        print(f"error: cannot listen on {args.metrics_host}:{args.metrics_port}: {exc}; pick another --metrics-port", file=sys.stderr)
        return 2
    print(f"tessera device plugin: metrics on http://{args.metrics_host}:{port}/metrics", file=sys.stderr, flush=True)
    kubelet = _start_kubelet_emulator(device_plugin_dir, pod_resources_socket, kube) if args.kubelet_emulator else None
    try:
        plugin.run(stop)
    except GpuBackendError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        server.stop(drain_s=1.0)
        if kubelet is not None:
            kubelet.stop()
    return 0


def _start_kubelet_emulator(device_plugin_dir: Path, pod_resources_socket: Path, kube: KubeApi) -> KubeletEmulator:
    """kubelet's two sockets for the demo: the one the tests drive the plugin with."""
    from tessera_node.testing.kubelet_emulator import KubeletEmulator

    return KubeletEmulator(device_plugin_dir, pod_resources_socket, kube).start()
