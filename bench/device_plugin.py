"""Device plugin benchmarks on the largest node (8 x H200 141 GB), over real unix-socket gRPC.

1. Allocate and PreStartContainer latency (p50/p99, client side, as kubelet sees it) for many pods
   bound by the real webhook/allocation model path, PreStart including its PodResources lookup,
   API server reads (in-memory) and the checks. The plugin runs in its own process, as on a node.
   Each round starts a fresh plugin process and kubelet emulator for the same bound pods; the
   figures are reported per round and pooled across rounds. Next to the client side, the plugin's
   own handler time (wall and the handler thread's CPU, recorded by the plugin) and the emulator's
   PodResources handler time are printed, so a slow call can be put on the transport, the plugin
   or the emulator.
2. ListAndWatch message size on the wire for the gpu-core scheme (100 tokens per GPU), and the
   size a one-device-per-MiB memory scheme would need, against kubelet's 4 MiB gRPC limit.

    python bench/device_plugin.py [--pods 250] [--rounds 3] [--order batch|interleaved]
                                  [--pace-ms 0] [--kubelet 1.30|1.34] [--profile FILE] [--json]

--order batch (default): every pod's Allocate, then PreStartContainer in shuffled order, as when a
burst of pods lands on a node (kubelet admits them, then their sandboxes come up).
--order interleaved: Allocate then PreStartContainer pod by pod, `--pace-ms` apart.
--kubelet: the release the emulator behaves as (default 1.30, what our stacks pin: PodResources Get
behind its off gate; 1.34: Get on). Both rate-limit PodResources as kubelet does (100 calls/s,
burst 10); the figures say how many calls kubelet rejected.
--profile FILE: profile the plugin process (cProfile, every thread: gRPC handlers, supervisor,
registry writer), write the merged stats of all rounds to FILE (read with `python -m pstats FILE`)
and print the functions with the most own and cumulative time. Profiling slows the plugin several
times over: a profiled run says where the time goes, not how long calls take.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import marshal
import pstats
import json
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tessera.model.contract import GPU_CORE, LABEL_POOL_KIND, LABEL_SHARING_POLICY
from tessera.kube.fake import FakeKubeApi
from tessera_node.registry import ContainerRegistry
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.deviceplugin.plugin import DevicePlugin, DevicePluginSettings, inventory_from_backend
from tessera_node.deviceplugin.publish import NodeReport, publish
from tessera_node.deviceplugin.server import list_and_watch_response
from tessera_node.gpu.simulated import SimulatedBackend
from tessera_node.gpu.spec import KNOWN_MODELS_MIB
from tessera_node.testing.kubelet_emulator import KubeletEmulator
from tessera_node.testing.kubelet_versions import VERSIONS, KubeletVersion

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # the control plane stand-in the tests use
from extender_stand_in import ExtenderStandIn  # noqa: E402

NODE = "h200-node"
SPEC = "H200-141GB:8"
KUBELET_LIMIT = 4 * 1024 * 1024
RPCS = ("Allocate", "PreStartContainer")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(ms: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(ms), "p99": _pct(ms, 0.99), "max": max(ms), "n": len(ms)}


def per_mib_message_bytes(gpus: int, mib_per_gpu: int) -> int:
    """Encoded size of one ListAndWatch message advertising one device per MiB."""
    response = dp.ListAndWatchResponse(
        devices=[dp.Device(ID=f"gpu{g}-mem{n:06d}", health="Healthy") for g in range(gpus) for n in range(mib_per_gpu)]
    )
    return response.ByteSize()


class _ThreadProfiles:
    """cProfile profiles one thread; this gives every thread of the process its own profile (the
    threads started after `install`, through `threading.setprofile`, and the caller's) and merges
    them at the end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._profiles: list[cProfile.Profile] = []

    def _start(self) -> None:
        profile = cProfile.Profile()
        with self._lock:
            self._profiles.append(profile)
        profile.enable()  # replaces the bootstrap hook below for this thread

    def install(self) -> None:
        threading.setprofile(lambda *_args: self._start())
        self._start()

    def stats(self) -> bytes:
        """The merged stats, marshalled as `pstats` writes them."""
        threading.setprofile(None)  # type: ignore[arg-type]
        merged = pstats.Stats()
        with self._lock:
            profiles = list(self._profiles)
        for profile in profiles:
            profile.disable()  # only stops the calling thread's; the others' stats are read as they are
            profile.create_stats()
            merged.add(profile)
        return marshal.dumps(merged.stats)  # type: ignore[attr-defined]


def _serve_plugin(settings: DevicePluginSettings, kube: FakeKubeApi, go: Any, stop: Any, report: Connection, profile: bool) -> None:
    """Child process: the device plugin, as on a node (its own process, its own GIL). Starts when
    its round does; sends back the plugin's own handler timings and the process's CPU time (and,
    with `profile`, its cProfile stats)."""
    # The fork copied the parent's heap (API server, bound pods, placement model), which a real
    # plugin process does not have: keep the collector from walking it (a 10 ms pause was seen).
    gc.freeze()
    go.wait()
    profiles = _ThreadProfiles() if profile else None
    if profiles is not None:
        profiles.install()
    backend = SimulatedBackend.from_spec(SPEC, node_seed=NODE)
    local_stop = threading.Event()

    def relay() -> None:
        stop.wait()
        local_stop.set()

    threading.Thread(target=relay, daemon=True).start()
    plugin = DevicePlugin(settings, backend, kube, ContainerRegistry(settings.state_dir))
    began = os.times()
    plugin.run(local_stop)
    ended = os.times()
    timings = plugin.rpc_timings.snapshot() if hasattr(plugin, "rpc_timings") else {}
    stats = profiles.stats() if profiles is not None else None
    report.send({"timings": timings, "cpu_s": (ended.user - began.user) + (ended.system - began.system), "profile": stats})
    report.close()


@dataclass
class _Child:
    """A forked plugin process waiting for its round."""

    root: Path
    settings: DevicePluginSettings
    process: Any
    go: Any
    stop: Any
    receive: Connection


def _fork_plugin(kube: FakeKubeApi, profile: bool) -> _Child:
    root = Path(tempfile.mkdtemp(prefix="dpbench", dir="/tmp"))
    settings = replace(
        DevicePluginSettings(node_name=NODE),
        device_plugin_dir=root / "dp",
        pod_resources_socket=root / "pr" / "kubelet.sock",
        state_dir=root / "state",
    )
    context = multiprocessing.get_context("fork")
    go, stop = context.Event(), context.Event()
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_serve_plugin, args=(settings, kube, go, stop, send, profile), daemon=True)
    process.start()
    send.close()
    return _Child(root, settings, process, go, stop, receive)


def _setup(pods: int, seed: int) -> tuple[FakeKubeApi, list[str], SimulatedBackend]:
    kube = FakeKubeApi()
    kube.create_node({"metadata": {"name": NODE, "labels": {LABEL_POOL_KIND: "shared", LABEL_SHARING_POLICY: "fixed-share"}}})
    inventory_source = SimulatedBackend.from_spec(SPEC, node_seed=NODE)
    inventory_source.open()
    publish(kube, NODE, NodeReport.of(inventory_from_backend(inventory_source)))
    extender = ExtenderStandIn(kube, NODE)
    rng = random.Random(seed)
    names = []
    for i in range(pods):
        extender.create_and_bind(f"p{i}", {"main": (rng.randint(1, 5), rng.choice([512, 1024, 2048, 4096]))})
        names.append(f"p{i}")
    return kube, names, inventory_source


def run_round(kube: FakeKubeApi, child: _Child, names: list[str], rng: random.Random, order: str, pace_ms: float, version: KubeletVersion) -> dict[str, Any]:
    """One fresh plugin process and kubelet emulator for the bound pods. The plugin runs in a
    child process forked before the first round (kubelet and the plugin are separate processes on a
    node, and no gRPC object may exist in a process that forks); the parent holds the API server
    and pods (the child inherited a copy of them, which is all PreStartContainer reads) and plays
    kubelet."""
    child.go.set()
    settings = child.settings
    kubelet = KubeletEmulator(settings.device_plugin_dir, settings.pod_resources_socket, kube, version=version).start()
    plugin_report: dict[str, Any] = {"timings": {}, "cpu_s": float("nan"), "profile": None}
    try:
        if not kubelet.wait_for(lambda: len(kubelet.devices(GPU_CORE)) == 800, 20):
            raise RuntimeError("plugin did not register")
        if order == "batch":
            for name in names:
                kubelet.allocate("default", name, "main", GPU_CORE)
            for name in rng.sample(names, len(names)):
                kubelet.start_container("default", name, "main", GPU_CORE)
                time.sleep(pace_ms / 1000)
        else:
            for name in rng.sample(names, len(names)):
                kubelet.allocate("default", name, "main", GPU_CORE)
                kubelet.start_container("default", name, "main", GPU_CORE)
                time.sleep(pace_ms / 1000)
        sizes = list(kubelet.plugin(GPU_CORE).message_sizes)  # type: ignore[union-attr]
    finally:
        child.stop.set()
        if child.receive.poll(20):
            plugin_report = child.receive.recv()
        child.process.join(20)
        kubelet.stop()
        shutil.rmtree(child.root, ignore_errors=True)
    client = {k: [v * 1000 for v in vals] for k, vals in kubelet.rpc_seconds.items()}
    plugin_wall = {k: [w * 1000 for w, _ in plugin_report["timings"].get(k, [])] for k in RPCS}
    plugin_cpu = {k: [c * 1000 for _, c in plugin_report["timings"].get(k, [])] for k in RPCS}
    emulator = {k: [v * 1000 for v in vals] for k, vals in kubelet.handler_seconds.items()} if hasattr(kubelet, "handler_seconds") else {}
    return {
        "client_ms": client,
        "plugin_wall_ms": plugin_wall,
        "plugin_cpu_ms": plugin_cpu,
        "emulator_ms": emulator,
        "plugin_process_cpu_s": plugin_report["cpu_s"],
        "message_sizes": sizes,
        "profile": plugin_report.get("profile"),
        "pod_resources_calls": dict(kubelet.pod_resources.calls),
        "rate_limited": kubelet.pod_resources.limiter.rejected,
    }


def run(pods: int, seed: int, pace_ms: float = 0.0, rounds: int = 3, order: str = "batch", profile: Path | None = None, kubelet: str = "1.30") -> dict[str, Any]:
    kube, names, inventory_source = _setup(pods, seed)
    rng = random.Random(seed)
    children = [_fork_plugin(kube, profile is not None) for _ in range(rounds)]
    try:
        raw = [run_round(kube, child, names, rng, order, pace_ms, VERSIONS[kubelet]) for child in children]
    finally:
        for child in children:
            child.stop.set()
            child.go.set()
            child.process.join(20)
            shutil.rmtree(child.root, ignore_errors=True)
    if profile is not None:
        _write_profile(profile, [r["profile"] for r in raw if r["profile"] is not None])
    all_unhealthy = list_and_watch_response(inventory_from_backend(inventory_source).all_unhealthy()).ByteSize()
    began = time.perf_counter()
    per_mib = per_mib_message_bytes(8, KNOWN_MODELS_MIB["H200-141GB"])
    per_mib_build_s = time.perf_counter() - began

    def pooled(key: str, rpc: str) -> list[float]:
        return [v for r in raw for v in r[key].get(rpc, [])]

    per_round = []
    for r in raw:
        entry: dict[str, Any] = {"plugin_process_cpu_s": r["plugin_process_cpu_s"], "pod_resources_calls": r["pod_resources_calls"], "rate_limited": r["rate_limited"]}
        for rpc, name in (("Allocate", "allocate"), ("PreStartContainer", "prestart")):
            entry[f"{name}_ms"] = _summary(r["client_ms"][rpc])
            if r["plugin_wall_ms"][rpc]:
                entry[f"{name}_plugin_ms"] = _summary(r["plugin_wall_ms"][rpc])
                entry[f"{name}_plugin_cpu_ms"] = _summary(r["plugin_cpu_ms"][rpc])
        for handler, values in r["emulator_ms"].items():
            if values:
                entry[f"emulator_{handler.lower()}_ms"] = _summary(values)
        per_round.append(entry)
    sizes = [s for r in raw for s in r["message_sizes"]]
    result: dict[str, Any] = {
        "node": SPEC,
        "pods": pods,
        "pace_ms": pace_ms,
        "order": order,
        "kubelet": kubelet,
        "rounds": rounds,
        "per_round": per_round,
        "allocate_ms": _summary(pooled("client_ms", "Allocate")),
        "prestart_ms": _summary(pooled("client_ms", "PreStartContainer")),
        "allocate_worst_round_p99": max(r["allocate_ms"]["p99"] for r in per_round),
        "prestart_worst_round_p99": max(r["prestart_ms"]["p99"] for r in per_round),
        "list_and_watch_bytes_max": max(sizes),
        "list_and_watch_messages": len(raw[-1]["message_sizes"]),
        "list_and_watch_bytes_all_unhealthy": all_unhealthy,
        "per_mib_devices": 8 * KNOWN_MODELS_MIB["H200-141GB"],
        "per_mib_message_bytes": per_mib,
        "per_mib_build_s": per_mib_build_s,
        "kubelet_limit_bytes": KUBELET_LIMIT,
    }
    for rpc, name in (("Allocate", "allocate"), ("PreStartContainer", "prestart")):
        if pooled("plugin_wall_ms", rpc):
            result[f"{name}_plugin_ms"] = _summary(pooled("plugin_wall_ms", rpc))
            result[f"{name}_plugin_cpu_ms"] = _summary(pooled("plugin_cpu_ms", rpc))
    return result


def _write_profile(path: Path, marshalled: list[bytes]) -> None:
    """Merge the rounds' stats into `path` (a pstats file)."""
    merged: pstats.Stats | None = None
    for blob in marshalled:
        stats = pstats.Stats()
        stats.stats = marshal.loads(blob)  # type: ignore[attr-defined]
        stats.get_top_level_stats()  # type: ignore[attr-defined]
        if merged is None:
            merged = stats
        else:
            merged.add(stats)
    if merged is not None:
        merged.dump_stats(str(path))


def _print_profile(path: Path, top: int = 25) -> None:
    for key, title in (("tottime", "own time"), ("cumulative", "cumulative time")):
        out = io.StringIO()
        pstats.Stats(str(path), stream=out).strip_dirs().sort_stats(key).print_stats(top)
        body = out.getvalue()
        print(f"--- plugin process profile, by {title} (all threads, all rounds; {path}) ---")
        print(body[body.find("   ncalls"):].rstrip())


def _line(s: dict[str, float]) -> str:
    return f"p50 {s['p50']:.2f} p99 {s['p99']:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="fresh plugin process and emulator per round (default 3)")
    parser.add_argument("--order", choices=["batch", "interleaved"], default="batch", help="batch: all Allocates, then starts shuffled (default); interleaved: pod by pod")
    parser.add_argument("--pace-ms", type=float, default=0.0, help="pause between container starts (default 0: back to back)")
    parser.add_argument("--kubelet", choices=sorted(VERSIONS), default="1.30", help="kubelet release the emulator behaves as (default 1.30)")
    parser.add_argument("--profile", type=Path, metavar="FILE", help="profile the plugin process (cProfile, all threads) into FILE and print its top functions")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.pods, args.seed, args.pace_ms, max(1, args.rounds), args.order, args.profile, args.kubelet)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    a, p = result["allocate_ms"], result["prestart_ms"]
    shape = "Allocate then PreStartContainer in shuffled order" if result["order"] == "batch" else "Allocate and PreStartContainer pod by pod"
    print(f"node {result['node']}, {result['pods']} pods bound, {shape}, {result['pace_ms']} ms between starts, {result['rounds']} rounds, kubelet {result['kubelet']}")
    for i, r in enumerate(result["per_round"], 1):
        line = f"  round {i}: Allocate {_line(r['allocate_ms'])} ms | PreStartContainer {_line(r['prestart_ms'])} ms"
        if "allocate_plugin_ms" in r:
            line += (f" | in plugin: Allocate {_line(r['allocate_plugin_ms'])}, PreStart {_line(r['prestart_plugin_ms'])} ms"
                     f" | plugin process CPU {r['plugin_process_cpu_s']:.2f} s")
        calls = r["pod_resources_calls"]
        line += f" | PodResources List {calls.get('List', 0)} Get {calls.get('Get', 0)}, rate-limited {r['rate_limited']}"
        print(line)
    print(f"Allocate            p50 {a['p50']:.2f} ms  p99 {a['p99']:.2f} ms  (n={a['n']}, target p99 <= 10 ms; worst round p99 {result['allocate_worst_round_p99']:.2f} ms)")
    print(f"PreStartContainer   p50 {p['p50']:.2f} ms  p99 {p['p99']:.2f} ms  (n={p['n']}, target p99 <= 10 ms; worst round p99 {result['prestart_worst_round_p99']:.2f} ms)")
    for rpc, name in (("Allocate", "allocate"), ("PreStartContainer", "prestart")):
        if f"{name}_plugin_ms" in result:
            wall, cpu = result[f"{name}_plugin_ms"], result[f"{name}_plugin_cpu_ms"]
            print(f"  in the plugin (handler, of the above): {rpc} wall {_line(wall)} ms, handler thread CPU {_line(cpu)} ms")
    emulator = [f"{k.removeprefix('emulator_').removesuffix('_ms')} p50 {v['p50']:.3f} ms (n={v['n']})"
                for k, v in result["per_round"][-1].items() if k.startswith("emulator_")]
    if emulator:
        print(f"  kubelet emulator's PodResources handlers (last round): {', '.join(emulator)}")
    limit = result["kubelet_limit_bytes"]
    print(f"ListAndWatch (gpu-core, 800 devices): {result['list_and_watch_bytes_max']:,} bytes max over {result['list_and_watch_messages']} messages "
          f"= {result['list_and_watch_bytes_max'] / limit:.2%} of kubelet's 4 MiB limit; "
          f"largest possible (every GPU unhealthy) {result['list_and_watch_bytes_all_unhealthy']:,} bytes")
    print(f"ListAndWatch if memory were one device per MiB ({result['per_mib_devices']:,} devices): {result['per_mib_message_bytes']:,} bytes "
          f"= {result['per_mib_message_bytes'] / limit:.1f} x the limit")
    if args.profile is not None:
        _print_profile(args.profile)


if __name__ == "__main__":
    main()
