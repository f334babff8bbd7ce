"""Extender latency and throughput over real HTTP on loopback (prints figures; not a test).

Starts `tessera scheduler serve --simulate NODES.csv` as a subprocess (its own interpreter, so
the client does not share its GIL), loads the simulated cluster to a target share of its GPUs
with trace pods through the same filter -> prioritize -> bind cycle kube-scheduler runs, then
measures:

- filter+prioritize latency of probe pods with NodeNames (nodeCacheCapable), all nodes as
  candidates, one request at a time: p50 / p90 / p99 / max on the wire (`scale.WireClient`:
  request bytes out to reply bytes in; this client's JSON work beside, as p50 / p99);
- bind throughput: pods already filtered are bound by several client threads at once.

    nice python bench/extender.py [--nodes CSV] [--pods CSV] [--target 0.9] [--probes 500] [--slowest 10]

`--slowest N` lists the N slowest probes with their shape and feasible-node count: a tail made
of one kind of pod points at its evaluation path.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scale import WireClient  # bench/ is the script's directory, first on sys.path

from tessera.alloc import MILLI_PER_GPU, PodRequest
from tessera.scheduler.simulate import trace_pod_manifest
from tessera.sim.trace import load_nodes, load_pods

TRACES = Path(os.environ.get("TESSERA_TRACES", Path(__file__).resolve().parent / "traces" / "openb"))


class Conn:
    def __init__(self, port: int) -> None:
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, verb: str, payload: Any) -> Any:
        self.c.request("POST", "/" + verb, body=json.dumps(payload, separators=(",", ":")).encode(), headers={"Content-Type": "application/json"})
        resp = self.c.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{verb}: HTTP {resp.status}: {data[:200]!r}")
        return json.loads(data)

    def get(self, path: str) -> str:
        self.c.request("GET", path)
        resp = self.c.getresponse()
        return resp.read().decode()


def start_server(nodes: Path, policy: str | None) -> tuple[subprocess.Popen[str], int]:
    cmd = [sys.executable, "-m", "tessera.cli.main", "scheduler", "serve", "--simulate", str(nodes), "--port", "0", "--log-level", "WARNING"]
    if policy:
        cmd += ["--placement", policy]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r":(\d+) ", line)
    if not match:
        proc.kill()
        raise SystemExit(f"extender did not start: {line!r}")
    print(line.strip())
    return proc, int(match.group(1))


def cycle(conn: Conn, pod: dict[str, Any], names: list[str]) -> str | None:
    """filter -> prioritize; returns the best node or None."""
    result = conn.post("filter", {"Pod": pod, "NodeNames": names})
    feasible = result["NodeNames"] or []
    if not feasible:
        return None
    scores = conn.post("prioritize", {"Pod": pod, "NodeNames": feasible})
    return str(max(scores, key=lambda s: s["Score"])["Host"])


def bind(conn: Conn, pod: dict[str, Any], node: str) -> str:
    meta = pod["metadata"]
    return str(conn.post("bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node})["Error"])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), to tell our cost from the machine's load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mix_epoch(conn: Conn) -> float:
    for line in conn.get("/metrics").splitlines():
        if line.startswith("tessera_extender_mix_epoch "):
            return float(line.split()[1])
    return 0.0


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=Path, default=TRACES / "openb_node_list_gpu_node.csv")
    parser.add_argument("--pods", type=Path, default=TRACES / "openb_pod_list_default.csv")
    parser.add_argument("--target", type=float, default=0.9, help="share of GPU capacity to allocate before measuring")
    parser.add_argument("--probes", type=int, default=500)
    parser.add_argument("--binds", type=int, default=400, help="pods bound concurrently for the throughput figure")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--policy", default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--slowest", type=int, default=0, metavar="N", help="list the N slowest probes with their pod shape")
    args = parser.parse_args()

    capacity_gpus = sum(len(n.gpus) for n in load_nodes(args.nodes))
    trace = [p.request for p in load_pods(args.pods) if p.request.gpu_milli_total > 0]
    random.Random(args.seed).shuffle(trace)
    proc, port = start_server(args.nodes, args.policy)
    try:
        conn = Conn(port)
        names = [n.name for n in load_nodes(args.nodes)]
        counter = 0

        def next_pod() -> tuple[dict[str, Any], float]:
            pod, request = next_request()
            return pod, request.gpu_milli_total / MILLI_PER_GPU

        def next_request() -> tuple[dict[str, Any], PodRequest]:
            nonlocal counter
            request = trace[counter % len(trace)]
            counter += 1
            pod = trace_pod_manifest(request, namespace="bench")
            pod["metadata"]["name"] = f"pod-{counter:06d}"
            return pod, request

        # 1. load to the target with the full cycle, one pod at a time (like one kube-scheduler)
        allocated = 0.0
        failed = 0
        cycles: list[float] = []
        started = time.perf_counter()
        while allocated < args.target * capacity_gpus and failed < 2000:
            pod, gpus = next_pod()
            t0 = time.perf_counter()
            node = cycle(conn, pod, names)
            if node is None or bind(conn, pod, node):
                failed += 1
                continue
            cycles.append(time.perf_counter() - t0)
            allocated += gpus
        load_s = time.perf_counter() - started
        print(f"loaded {len(cycles)} pods ({allocated:.0f} of {capacity_gpus} GPUs = {100 * allocated / capacity_gpus:.1f} %), "
              f"{failed} did not fit, in {load_s:.1f} s: {len(cycles) / load_s:.0f} scheduling cycles/s; "
              f"cycle p50 {1000 * pct(cycles, 0.5):.2f} ms, p99 {1000 * pct(cycles, 0.99):.2f} ms")

        # 2. filter + prioritize latency at that load, NodeNames with every node as candidate
        latencies: list[float] = []
        filter_only: list[float] = []
        probes: list[tuple[float, float, int, PodRequest]] = []  # (filter+prioritize, filter, feasible, pod)
        server_cpu = cpu_seconds(proc.pid)
        epoch = mix_epoch(conn)
        wire = WireClient(port, names)
        with_json: list[float] = []
        for _ in range(args.probes):
            pod, request = next_request()
            probe = wire.probe(pod)
            latencies.append(probe.wire)
            filter_only.append(probe.filter_wire)
            with_json.append(probe.with_json)
            probes.append((probe.wire, probe.filter_wire, probe.feasible, request))
        server_cpu = cpu_seconds(proc.pid) - server_cpu
        epochs = mix_epoch(conn) - epoch
        print(f"filter+prioritize over HTTP, {len(names)} nodes / {capacity_gpus} GPUs, {args.probes} probes: "
              f"p50 {1000 * statistics.median(latencies):.2f} ms, p90 {1000 * pct(latencies, 0.9):.2f} ms, "
              f"p99 {1000 * pct(latencies, 0.99):.2f} ms, max {1000 * max(latencies):.2f} ms "
              f"(filter alone p50 {1000 * statistics.median(filter_only):.2f} ms, p99 {1000 * pct(filter_only, 0.99):.2f} ms; "
              f"with the client's JSON p50 {1000 * statistics.median(with_json):.2f} ms, p99 {1000 * pct(with_json, 0.99):.2f} ms); "
              f"extender CPU {1000 * server_cpu / args.probes:.2f} ms per filter+prioritize on average; "
              f"{epochs:.0f} workload-mix epoch changes during the probes")
        for total, filtered, count, request in sorted(probes, key=lambda p: p[0], reverse=True)[: args.slowest]:
            shape = "+".join(f"{c.gpu_count}x{c.gpu_milli}m" for c in request.gpu_containers)
            print(f"  {1000 * total:7.2f} ms (filter {1000 * filtered:6.2f}): {shape} GPU, cpu {request.cpu_milli}m, "
                  f"memory {request.memory_mib}Mi; {count} feasible nodes")

        # 3. bind throughput: filter first, then bind concurrently. Each pod goes to a different
        # feasible node (round robin) so the figure is binds completed, not capacity races lost.
        decided: list[tuple[dict[str, Any], str]] = []
        attempts = 0
        while len(decided) < args.binds and attempts < 20 * args.binds:
            attempts += 1
            pod, _ = next_pod()
            feasible = conn.post("filter", {"Pod": pod, "NodeNames": names})["NodeNames"] or []
            if feasible:
                decided.append((pod, feasible[len(decided) % len(feasible)]))
        errors: list[str] = []
        lock = threading.Lock()
        work = list(decided)

        def worker() -> None:
            c = Conn(port)
            while True:
                with lock:
                    if not work:
                        return
                    pod, node = work.pop()
                error = bind(c, pod, node)
                if error:
                    with lock:
                        errors.append(error)

        threads = [threading.Thread(target=worker) for _ in range(args.threads)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        print(f"binds: {len(decided)} with {args.threads} client threads in {elapsed:.2f} s = {len(decided) / elapsed:.0f} binds/s "
              f"({len(errors)} refused: capacity taken meanwhile)")
        metrics = conn.get("/metrics")
        wanted = ("tessera_extender_allocated_gpu ", "tessera_extender_pods ", "tessera_extender_binds_total", "tessera_extender_mix_epoch ")
        for line in metrics.splitlines():
            if line.startswith(wanted):
                print("  " + line)
        print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"load average {os.getloadavg()[0]:.1f} at the end")
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
