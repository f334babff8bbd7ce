"""Device plugin benchmarks on the largest node (8 x H200 141 GB), over real unix-socket gRPC.

1. Allocate and PreStartContainer latency (p50/p99, client side, as kubelet sees it) for many pods
   bound by the real webhook/allocation model path, PreStart including its PodResources lookup,
   API server reads (in-memory) and the checks. The plugin runs in its own process, as on a node.
2. ListAndWatch message size on the wire for the gpu-core scheme (100 tokens per GPU), and the
   size a one-device-per-MiB memory scheme would need, against kubelet's 4 MiB gRPC limit.

    python bench/device_plugin.py [--pods 250] [--pace-ms 0] [--json]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tessera.contract import GPU_CORE, LABEL_POOL_KIND, LABEL_SHARING_POLICY
from tessera.kube.fake import FakeKubeApi
from tessera_node.agent.registry import ContainerRegistry
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.deviceplugin.plugin import DevicePlugin, DevicePluginSettings, inventory_from_backend
from tessera_node.deviceplugin.publish import NodeReport, publish
from tessera_node.deviceplugin.server import list_and_watch_response
from tessera_node.gpu.simulated import SimulatedBackend
from tessera_node.gpu.spec import KNOWN_MODELS_MIB
from tessera_node.testing.binder import ExtenderStandIn
from tessera_node.testing.kubelet_emulator import KubeletEmulator

NODE = "h200-node"
SPEC = "H200-141GB:8"
KUBELET_LIMIT = 4 * 1024 * 1024


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def per_mib_message_bytes(gpus: int, mib_per_gpu: int) -> int:
    """Encoded size of one ListAndWatch message advertising one device per MiB."""
    response = dp.ListAndWatchResponse(
        devices=[dp.Device(ID=f"gpu{g}-mem{n:06d}", health="Healthy") for g in range(gpus) for n in range(mib_per_gpu)]
    )
    return response.ByteSize()


def _serve_plugin(settings: DevicePluginSettings, kube: FakeKubeApi, stop: Any) -> None:
    """Child process: the device plugin, as on a node (its own process, its own GIL)."""
    backend = SimulatedBackend.from_spec(SPEC, node_seed=NODE)
    local_stop = threading.Event()

    def relay() -> None:
        stop.wait()
        local_stop.set()

    threading.Thread(target=relay, daemon=True).start()
    DevicePlugin(settings, backend, kube, ContainerRegistry(settings.state_dir)).run(local_stop)


def run(pods: int, seed: int, pace_ms: float = 0.0) -> dict[str, Any]:
    """The plugin runs in a forked child process (kubelet and the plugin are separate processes on
    a node); the parent holds the API server and pods (the child inherits a copy of them at fork,
    which is all PreStartContainer reads) and plays kubelet. No gRPC object exists before the fork."""
    root = Path(tempfile.mkdtemp(prefix="dpbench", dir="/tmp"))
    kube = FakeKubeApi()
    kube.create_node({"metadata": {"name": NODE, "labels": {LABEL_POOL_KIND: "shared", LABEL_SHARING_POLICY: "fixed-share"}}})
    settings = replace(
        DevicePluginSettings(node_name=NODE),
        device_plugin_dir=root / "dp",
        pod_resources_socket=root / "pr" / "kubelet.sock",
        state_dir=root / "state",
    )
    inventory_source = SimulatedBackend.from_spec(SPEC, node_seed=NODE)
    inventory_source.open()
    publish(kube, NODE, NodeReport.of(inventory_from_backend(inventory_source)))
    extender = ExtenderStandIn(kube, NODE)
    rng = random.Random(seed)
    names = []
    for i in range(pods):
        extender.create_and_bind(f"p{i}", {"main": (rng.randint(1, 5), rng.choice([512, 1024, 2048, 4096]))})
        names.append(f"p{i}")
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    child = context.Process(target=_serve_plugin, args=(settings, kube, stop), daemon=True)
    child.start()
    kubelet = KubeletEmulator(settings.device_plugin_dir, settings.pod_resources_socket, kube).start()
    try:
        if not kubelet.wait_for(lambda: len(kubelet.devices(GPU_CORE)) == 800, 20):
            raise RuntimeError("plugin did not register")
        for name in names:
            kubelet.allocate("default", name, "main", GPU_CORE)
        for name in rng.sample(names, len(names)):
            kubelet.start_container("default", name, "main", GPU_CORE)
            time.sleep(pace_ms / 1000)
        sizes = list(kubelet.plugin(GPU_CORE).message_sizes)  # type: ignore[union-attr]
    finally:
        stop.set()
        child.join(20)
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
    all_unhealthy = list_and_watch_response(inventory_from_backend(inventory_source).all_unhealthy()).ByteSize()
    began = time.perf_counter()
    per_mib = per_mib_message_bytes(8, KNOWN_MODELS_MIB["H200-141GB"])
    per_mib_build_s = time.perf_counter() - began
    ms = {k: [v * 1000 for v in vals] for k, vals in kubelet.rpc_seconds.items()}
    return {
        "node": SPEC,
        "pods": pods,
        "pace_ms": pace_ms,
        "allocate_ms": {"p50": statistics.median(ms["Allocate"]), "p99": _pct(ms["Allocate"], 0.99), "n": len(ms["Allocate"])},
        "prestart_ms": {"p50": statistics.median(ms["PreStartContainer"]), "p99": _pct(ms["PreStartContainer"], 0.99), "n": len(ms["PreStartContainer"])},
        "list_and_watch_bytes_max": max(sizes),
        "list_and_watch_messages": len(sizes),
        "list_and_watch_bytes_all_unhealthy": all_unhealthy,
        "per_mib_devices": 8 * KNOWN_MODELS_MIB["H200-141GB"],
        "per_mib_message_bytes": per_mib,
        "per_mib_build_s": per_mib_build_s,
        "kubelet_limit_bytes": KUBELET_LIMIT,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pace-ms", type=float, default=0.0, help="pause between container starts (default 0: back to back)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.pods, args.seed, args.pace_ms)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    a, p = result["allocate_ms"], result["prestart_ms"]
    print(f"node {result['node']}, {result['pods']} pods bound, Allocate then PreStartContainer in shuffled order, {result['pace_ms']} ms between starts")
    print(f"Allocate            p50 {a['p50']:.2f} ms  p99 {a['p99']:.2f} ms  (n={a['n']}, target p99 <= 10 ms)")
    print(f"PreStartContainer   p50 {p['p50']:.2f} ms  p99 {p['p99']:.2f} ms  (n={p['n']}, target p99 <= 10 ms)")
    limit = result["kubelet_limit_bytes"]
    print(f"ListAndWatch (gpu-core, 800 devices): {result['list_and_watch_bytes_max']:,} bytes max over {result['list_and_watch_messages']} messages "
          f"= {result['list_and_watch_bytes_max'] / limit:.2%} of kubelet's 4 MiB limit; "
          f"largest possible (every GPU unhealthy) {result['list_and_watch_bytes_all_unhealthy']:,} bytes")
    print(f"ListAndWatch if memory were one device per MiB ({result['per_mib_devices']:,} devices): {result['per_mib_message_bytes']:,} bytes "
          f"= {result['per_mib_message_bytes'] / limit:.1f} x the limit")


if __name__ == "__main__":
    main()
