"""`tessera node dra-plugin` (also `tessera-node dra-plugin`): argument parsing and wiring only.

Prints one line to stdout once kubelet accepted the registration (`ready: DRA driver ...`), logs
to stderr. Exit 2 for input that cannot work (a flag, the pools file, the state dir, a damaged
checkpoint), naming it. With `--fake-kube` every path left at its default moves under
`$TMPDIR/tessera-<node>/` (as the device plugin's), and `--kubelet-emulator 1.34|1.36` runs
kubelet's plugin watcher in the process, so a demo registers and prints ready: with no kubelet.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from tessera.httpd.stopsignal import install_stop_handler
from tessera.kube.api import KubeApi, KubeApiError
from tessera.model.contract import ENV_POOLS_FILE, LABEL_POOL, LABEL_POOL_KIND
from tessera.model.pools_file import PoolsFileError, load_pools_file
from tessera_node.demo_paths import DefaultPath, demo_root, resolve
from tessera_node.dra.cdi import CdiSettings
from tessera_node.dra.checkpoint import CheckpointCorrupt
from tessera_node.dra.plugin import DraPlugin, DraPluginSettings
from tessera_node.gpu import open_backend
from tessera_node.gpu.backend import GpuBackendError
from tessera_node.gpu.spec import SpecError
from tessera_node.registry import ContainerRegistry, RegistryCorrupt

if TYPE_CHECKING:
    from tessera_node.testing.kubelet_dra import KubeletDra

DEFAULTS = DraPluginSettings(node_name="")
CDI_DEFAULTS = CdiSettings()
FAKE_POOL = "simulated"
EMULATED_KUBELETS = ("1.34", "1.36")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    demo = "; with --fake-kube: under $TMPDIR/tessera-<node>/"
    parser.add_argument("--simulate", metavar="SPEC", help='simulated GPUs instead of NVML, e.g. "T4:2" or "H100-80GB:8"')
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="this node (default: $NODE_NAME; with --simulate and --fake-kube: sim-node)")
    parser.add_argument(
        "--registry-dir", type=Path, default=DefaultPath(DEFAULTS.registry_dir),
        help=f"kubelet's plugin watcher directory; the registration socket goes here (default {DEFAULTS.registry_dir}{demo}plugins_registry)",
    )
    parser.add_argument(
        "--plugins-dir", type=Path, default=DefaultPath(DEFAULTS.plugins_dir),
        help=f"kubelet's plugins directory; the DRA socket is <dir>/gpu.tessera.dev/dra.sock (default {DEFAULTS.plugins_dir}{demo}plugins)",
    )
    parser.add_argument(
        "--state-dir", type=Path, default=DefaultPath(DEFAULTS.state_dir),
        help=f"the agent's state dir: container registry and the DRA checkpoint (default {DEFAULTS.state_dir}{demo}agent)",
    )
    parser.add_argument("--cdi-dir", type=Path, default=DefaultPath(CDI_DEFAULTS.cdi_dir), help=f"CDI spec directory the runtime reads (default {CDI_DEFAULTS.cdi_dir}{demo}cdi)")
    parser.add_argument("--mps-dir", default=CDI_DEFAULTS.mps_pipe_host_dir, help=f"host directory of MPS pipes, mounted into fixed-share containers (default {CDI_DEFAULTS.mps_pipe_host_dir})")
    parser.add_argument("--mps-shm-dir", default=None, help="host tmpfs mounted on /dev/shm of fixed-share containers (default: none)")
    parser.add_argument(
        "--pools-file", type=Path, default=os.environ.get(ENV_POOLS_FILE) or None,
        help=f"pools file (the mounted tessera-pools ConfigMap); its entry for the node's pool wins over the node's labels (default: ${ENV_POOLS_FILE}, else labels only)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster service account)")
    parser.add_argument("--fake-kube", action="store_true", help=f"an in-memory API server holding only this node, in shared pool {FAKE_POOL!r}; paths default under the temp directory")
    parser.add_argument(
        "--kubelet-emulator", choices=EMULATED_KUBELETS, default=None,
        help="with --fake-kube: run kubelet's plugin watcher of this release in the process, so the demo registers with no kubelet",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def _kube(args: argparse.Namespace, node_name: str) -> KubeApi:
    if args.fake_kube:
        from tessera.kube.fake import FakeKubeApi

        fake = FakeKubeApi(dra_consumable_capacity=args.kubelet_emulator != "1.34")
        fake.create_node({"metadata": {"name": node_name, "labels": {LABEL_POOL: FAKE_POOL, LABEL_POOL_KIND: "shared"}}})
        return fake
    from tessera.kube.client import ClientSettings, KubernetesClientApi

    return KubernetesClientApi.connect(ClientSettings(kubeconfig=args.kubeconfig))


def _error(message: str, code: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.kubelet_emulator and not args.fake_kube:
        return _error("--kubelet-emulator stands in for kubelet in a demo; it needs --fake-kube")
    node_name = args.node_name or ("sim-node" if args.simulate and args.fake_kube else "")
    if not node_name:
        return _error("no node name; pass --node-name or set NODE_NAME (downward API spec.nodeName)")
    root = demo_root(node_name)
    registry_dir = resolve(args.registry_dir, args.fake_kube, root / "plugins_registry")
    plugins_dir = resolve(args.plugins_dir, args.fake_kube, root / "plugins")
    state_dir = resolve(args.state_dir, args.fake_kube, root / "agent")
    cdi_dir = resolve(args.cdi_dir, args.fake_kube, root / "cdi")
    if args.pools_file is not None:
        try:
            load_pools_file(args.pools_file)
        except PoolsFileError as exc:
            return _error(f"--pools-file {exc}")
    hint = "" if args.fake_kube else " (on a node the DaemonSet mounts it; for a demo add --fake-kube or pass the directory)"
    for flag, path in (("--registry-dir", registry_dir), ("--plugins-dir", plugins_dir), ("--cdi-dir", cdi_dir)):
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return _error(f"{flag} {path}: {exc.strerror or exc}{hint}")
    try:
        registry = ContainerRegistry(state_dir)
        registry.snapshot()
    except OSError as exc:
        return _error(f"--state-dir {state_dir}: {exc.strerror or exc}{hint}")
    except RegistryCorrupt as exc:
        return _error(str(exc))
    try:
        backend = open_backend(args.simulate, node_seed=node_name)
        kube = _kube(args, node_name)
    except SpecError as exc:
        return _error(str(exc))
    except (KubeApiError, OSError) as exc:
        return _error(str(exc), 1)
    settings = DraPluginSettings(
        node_name=node_name, registry_dir=registry_dir, plugins_dir=plugins_dir, state_dir=state_dir,
        cdi=CdiSettings(cdi_dir=cdi_dir, mps_pipe_host_dir=args.mps_dir, mps_shm_host_dir=args.mps_shm_dir), pools_file=args.pools_file,
    )
    try:
        plugin = DraPlugin(settings, backend, kube, registry, on_ready=lambda ready: print(ready.line(), flush=True))
    except CheckpointCorrupt as exc:
        return _error(str(exc))
    stop = threading.Event()
    install_stop_handler(stop)
    kubelet = _start_kubelet_emulator(args.kubelet_emulator, registry_dir) if args.kubelet_emulator else None
    try:
        plugin.run(stop)
    except GpuBackendError as exc:
        return _error(str(exc), 1)
    finally:
        if kubelet is not None:
            kubelet.stop()
    return 0


def _start_kubelet_emulator(version: str, registry_dir: Path) -> KubeletDra:
    from tessera_node.testing.kubelet_dra import VERSIONS, KubeletDra

    return KubeletDra(VERSIONS[version], registry_dir).start()

