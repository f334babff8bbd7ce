"""In-process view of one scale point: where the memory and the time of filter+prioritize go.

    nice python bench/scale_memory.py --nodes 10000 [--fill 0.9] [--probes 500] [--profile]

Builds what `tessera scheduler serve --simulate NODES.csv --simulate-pods ... --simulate-fill 0.9`
builds (the same functions, no HTTP server), then:

- memory: the deep size of the simulated API server's store (pods, nodes, ConfigMaps, event
  logs) and of the extender's own state (cache, evaluation caches and views, binder), by walking
  the objects each one holds (`gc.get_referents`; classes, functions and modules not counted), so
  the RSS of `bench/scale.py` can be split between the fake and the extender;
- time: `--probes` filter+prioritize calls through the same steps as the HTTP handler (JSON decode,
  `ExtenderArgs.from_json`, `Extender.filter` / `prioritize`, JSON encode) on one thread, without
  sockets: the extender's own cost per pod, p50 / p99;
- `--profile`: the same probes under cProfile (top functions), and the bind path's split between
  the fake API server (`tessera/kube/fake.py`) and the rest, from a profiled fill of `--profile-binds`
  more pods.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import PODS_CSV, eight_gpu_nodes  # noqa: E402

from tessera.httpd import json_response, parse_json  # noqa: E402
from tessera.scheduler.extender_types import ExtenderArgs  # noqa: E402
from tessera.scheduler.gc_freeze import freeze_survivors  # noqa: E402
from tessera.scheduler.service import ExtenderConfig, ExtenderService  # noqa: E402
from tessera.scheduler.simulate import ensure_pod, simulated_api, trace_pod_manifest  # noqa: E402
from tessera.scheduler.simulate_fill import cycle, fill, trace_arrivals  # noqa: E402
from tessera.scheduler.state import StateSettings  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "scale"
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.CodeType)


def deep_size(*roots: object, exclude: set[int] | None = None) -> tuple[int, set[int]]:
    """Bytes of every object reachable from `roots` (each counted once), and their ids."""
    seen: set[int] = set(exclude or ())
    own: set[int] = set()
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        own.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total, own


def http_like(service: ExtenderService, verb: str, body: bytes) -> bytes:
    """What the HTTP endpoint does between the socket reads and writes."""
    args = ExtenderArgs.from_json(parse_json(body))
    if verb == "filter":
        return service.extender.filter(args).to_json_bytes()
    return json_response(200, [h.to_json() for h in service.extender.prioritize(args)]).body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--fill", type=float, default=0.9)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--probes", type=int, default=500)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-binds", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    nodes_csv = eight_gpu_nodes(args.nodes, OUT)
    fake = simulated_api(nodes_csv)
    service = ExtenderService(fake, ExtenderConfig(state=StateSettings(track_host_resources=True)), pod_sink=lambda p: ensure_pod(fake, p))
    trace = trace_arrivals(PODS_CSV, args.seed)
    arrivals = cycle(trace)
    result = fill(fake, service.state, service.binder, arrivals, args.fill)
    print(f"{args.nodes} nodes: fill bound {result.bound} pods ({100 * result.allocated_share:.1f} %) in {result.seconds:.1f} s", flush=True)
    service.sync.start()
    if not service.sync.wait_ready(600):
        raise SystemExit("cache did not sync")
    freeze_survivors()  # as `serve` does once in sync

    names = json.dumps([f"scale-node-{i:05d}" for i in range(args.nodes)], separators=(",", ":")).encode()
    counter = 0

    def probe() -> float:
        nonlocal counter
        counter += 1
        pod = trace_pod_manifest(next(arrivals), namespace="default")
        pod["metadata"]["name"] = f"probe-{counter:06d}"
        pod_json = json.dumps(pod, separators=(",", ":")).encode()
        t0 = time.perf_counter()
        reply = http_like(service, "filter", b'{"Pod":' + pod_json + b',"NodeNames":' + names + b"}")
        spent = time.perf_counter() - t0
        feasible = json.loads(reply)["NodeNames"] or []  # the client's work: not timed
        if feasible:
            body = b'{"Pod":' + pod_json + b',"NodeNames":' + json.dumps(feasible).encode() + b"}"
            t0 = time.perf_counter()
            http_like(service, "prioritize", body)
            spent += time.perf_counter() - t0
        return spent

    for _ in range(args.warmup):
        probe()
    times = [probe() for _ in range(args.probes)]
    ordered = sorted(times)
    print(f"in-process filter+prioritize ({args.probes} probes after {args.warmup}): p50 {1000 * statistics.median(times):.2f} ms, "
          f"p90 {1000 * ordered[int(0.9 * len(ordered))]:.2f}, p99 {1000 * ordered[int(0.99 * len(ordered))]:.2f}, "
          f"max {1000 * ordered[-1]:.1f} ms", flush=True)

    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.probes):
            probe()
        profile.disable()
        print("--- cProfile of the probes (tottime) ---")
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        profile = cProfile.Profile()
        profile.enable()
        fill(fake, service.state, service.binder, arrivals, 1.0, prefix="more", max_arrivals=args.profile_binds)
        profile.disable()
        stats = pstats.Stats(profile)
        fake_s = sum(
            v[3] for k, v in stats.stats.items()  # type: ignore[attr-defined]
            if k[0].endswith("kube/fake.py") and k[2] in ("get_pod", "create_pod", "create_configmap", "replace_configmap", "patch_pod_annotations", "bind_pod")
        )
        total = stats.total_tt  # type: ignore[attr-defined]
        print(f"--- profiled fill of {args.profile_binds} more pods, sync threads running: {total:.1f} s, of which the fake API server's calls {fake_s:.1f} s ({100 * fake_s / total:.0f} %) ---")
        stats.sort_stats("cumulative").print_stats(30)

    service.sync.stop()
    fake.close()
    gc.collect()
    store, store_ids = deep_size(*fake.store_parts())
    extender, _ = deep_size(service.state, service.binder, exclude=store_ids)
    print(f"memory: simulated API server store {store / 2**20:.0f} MiB ({len(fake.list_pods())} pods, {len(fake.list_configmaps())} ConfigMaps, "
          f"{fake.logged_events()} logged events); extender state {extender / 2**20:.0f} MiB "
          f"({extender / args.nodes / 1024:.1f} KiB per node)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
