"""The scale curve: the extender at 1,000 to 10,000 GPU nodes, and `tessera sim replay` at 1x and 10x.

    nice python bench/scale.py                       # the whole curve, both parts, and the plot
    nice python bench/scale.py --sizes 1000,5000 --repeat 2 --no-replay

Extender, per size N (8 GPUs per node, `bench/synthetic.py`): starts `tessera scheduler serve
--simulate NODES.csv --simulate-pods openb_pod_list_default.csv --simulate-fill 0.9` in its own
process (the fill binds trace pods through the production binder until 90 % of the GPUs are
allocated: `tessera/scheduler/simulate_fill.py`), then over HTTP on loopback, one request at a
time as kube-scheduler's scheduling cycle sends them (NodeNames, nodeCacheCapable):

- `--warmup` probe pods filtered and prioritized (not counted: the first pod of each shape after
  the fill evaluates every node once), then `--probes` more, timed: p50 / p90 / p99 / max of
  filter + prioritize on the wire (`WireClient`: request bytes out to reply bytes in, this
  client's JSON work outside the timing; p50 / p99 with it included are kept beside), and the
  extender's CPU per probe (utime + stime of its process). Twice:
  - `kube-scheduler`: as many candidates as kube-scheduler sends. It stops filtering once it has
    found numFeasibleNodesToFind nodes (kubernetes/kubernetes v1.30.0, pkg/scheduler/
    schedule_one.go: percentageOfNodesToScore, unset in our KubeSchedulerConfiguration, adapts as
    50 % - N/125 %, at least 5 % and 100 nodes: 420, 750, 500 and 500 nodes at 1,000, 2,500,
    5,000 and 10,000) and sends only those to the extender; here a window of that many node
    names, moved on by its length each pod as kube-scheduler's nextStartNodeIndex is;
  - `all`: every node a candidate (a percentageOfNodesToScore of 100): the worst case;
  `--slowest N` lists the N slowest probes of each with their pod shape and feasible-node count
  (a tail of one kind of pod points at its evaluation path);
- `--binds` pods filtered, then bound by `--threads` client threads at once, each to a different
  feasible node where there are enough: successful binds per second (refusals, a pod decided
  for a node an earlier one filled, are counted apart);
- the extender process's resident memory (VmRSS, and its peak VmHWM) after the fill and at the
  end. With `--simulate` the in-memory API server lives in the same process, so RSS includes its
  store; `bench/scale_memory.py` splits the two.

Probe and bind pods continue the fill's arrival sequence (the shuffled trace, cycled). Replay:
`bench/sim_scale.py` (run from here unless --no-replay). Results: `bench/out/scale/results.json`,
the plot: `docs/figures/scale-curve.png` (`bench/scale_plot.py`).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import PODS_CSV, eight_gpu_nodes  # noqa: E402

from tessera.alloc import pod_request_from_k8s  # noqa: E402
from tessera.scheduler.simulate import trace_pod_manifest  # noqa: E402
from tessera.scheduler.simulate_fill import trace_arrivals  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "scale"
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "figures" / "scale-curve.png"
_FILL = re.compile(r"simulated fill: (\d+) pods bound, .* (\d+) fitted nowhere, in ([\d.]+) s")


class Client:
    def __init__(self, port: int, names: list[str]) -> None:
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.all_names = json.dumps(names, separators=(",", ":")).encode()

    def post(self, verb: str, body: bytes) -> Any:
        self.c.request("POST", "/" + verb, body=body, headers={"Content-Type": "application/json"})
        resp = self.c.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{verb}: HTTP {resp.status}: {data[:200]!r}")
        return json.loads(data)

    def ask(self, verb: str, pod: dict[str, Any], names: bytes | None = None) -> Any:
        pod_json = json.dumps(pod, separators=(",", ":")).encode()
        return self.post(verb, b'{"Pod":' + pod_json + b',"NodeNames":' + (names or self.all_names) + b"}")

    def bind(self, pod: dict[str, Any], node: str) -> str:
        meta = pod["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
        return str(self.post("bind", json.dumps(body).encode())["Error"])


class Probe(NamedTuple):
    """One filter + prioritize cycle as `WireClient.probe` timed it (seconds)."""

    feasible: int
    filter_wire: float  # /filter alone, on the wire
    wire: float  # /filter + /prioritize on the wire
    with_json: float  # the same with this client's JSON encoding and decoding


class WireClient:
    """kube-scheduler's side of a scheduling cycle on one kept-alive connection, timing only the
    wire: from the first byte of a request sent to the last byte of its reply received. Encoding
    the request and decoding the reply are the client's own work (Go's encoding/json in
    kube-scheduler, several times faster than Python's), done here outside the timed part.
    `probe` returns that time and, separately, the time with this client's JSON work included
    (the figure the earlier runs reported)."""

    _LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)

    def __init__(self, port: int, names: list[str]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=300)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self.all_names = json.dumps(names, separators=(",", ":")).encode()

    def roundtrip(self, verb: str, body: bytes) -> tuple[bytes, float]:
        request = b"POST /%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            verb.encode(), len(body), body,
        )
        sock, buffer = self.sock, b""
        started = time.perf_counter()
        sock.sendall(request)
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError(f"{verb}: the extender closed the connection")
            buffer += chunk
        head, _, reply = buffer.partition(b"\r\n\r\n")
        match = self._LENGTH.search(head)
        if match is None:
            raise RuntimeError(f"{verb}: reply without Content-Length: {head[:200]!r}")
        length = int(match.group(1))
        while len(reply) < length:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError(f"{verb}: the extender closed the connection mid-reply")
            reply += chunk
        elapsed = time.perf_counter() - started
        if not head.startswith(b"HTTP/1.1 200 "):
            raise RuntimeError(f"{verb}: {head.splitlines()[0]!r}: {reply[:200]!r}")
        return reply, elapsed

    def probe(self, pod: dict[str, Any], names: bytes | None = None) -> Probe:
        started = time.perf_counter()
        pod_json = json.dumps(pod, separators=(",", ":")).encode()
        reply, filtered = self.roundtrip("filter", b'{"Pod":' + pod_json + b',"NodeNames":' + (names or self.all_names) + b"}")
        feasible = json.loads(reply)["NodeNames"] or []
        wire = filtered
        if feasible:
            reply, second = self.roundtrip("prioritize", b'{"Pod":' + pod_json + b',"NodeNames":' + json.dumps(feasible, separators=(",", ":")).encode() + b"}")
            json.loads(reply)
            wire += second
        return Probe(len(feasible), filtered, wire, time.perf_counter() - started)


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM in KiB, and CPU seconds (utime + stime) x 100."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out["cpu_centis"] = round(100 * (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return out


def _shape(pod: dict[str, Any]) -> str:
    """A probe pod's GPU, CPU and memory asks, as `bench/extender.py --slowest` prints them."""
    request = pod_request_from_k8s(pod)
    gpus = "+".join(f"{c.gpu_count}x{c.gpu_milli}m" for c in request.gpu_containers) or "no"
    return f"{gpus} GPU, cpu {request.cpu_milli}m, memory {request.memory_mib}Mi"


def feasible_nodes_to_find(n: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind with percentageOfNodesToScore unset (v1.30)."""
    if n < 100:
        return n
    percentage = max(5, 50 - n // 125)
    return max(100, n * percentage // 100)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_server(nodes: Path, fill: float, seed: int) -> tuple[subprocess.Popen[str], int, dict[str, float]]:
    cmd = [
        sys.executable, "-m", "tessera.cli.main", "scheduler", "serve", "--simulate", str(nodes), "--port", "0",
        "--log-level", "WARNING", "--simulate-pods", str(PODS_CSV), "--simulate-fill", str(fill), "--simulate-seed", str(seed),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    info: dict[str, float] = {}
    started = time.perf_counter()
    for line in proc.stdout:
        print("  " + line.strip(), flush=True)
        if (m := _FILL.search(line)) is not None:
            info = {"fill_bound": int(m.group(1)), "fill_unplaced": int(m.group(2)), "fill_s": float(m.group(3))}
        if (m := re.search(r"tessera extender on http://[\d.]+:(\d+) ", line)) is not None:
            info["startup_s"] = time.perf_counter() - started
            return proc, int(m.group(1)), info
    proc.kill()
    raise SystemExit(f"the extender did not start (exit {proc.wait()})")


def measure(n: int, args: argparse.Namespace) -> dict[str, Any]:
    nodes = eight_gpu_nodes(n, OUT)
    names = [f"scale-node-{i:05d}" for i in range(n)]
    trace = trace_arrivals(PODS_CSV, args.seed)
    load = os.getloadavg()[0]
    proc, port, info = start_server(nodes, args.fill, args.seed)
    try:
        client = Client(port, names)
        wire = WireClient(port, names)
        position = int(info.get("fill_bound", 0) + info.get("fill_unplaced", 0))
        counter = 0

        def next_pod(prefix: str) -> dict[str, Any]:
            nonlocal counter
            counter += 1
            pod = trace_pod_manifest(trace[(position + counter) % len(trace)], namespace="default")
            pod["metadata"]["name"] = f"{prefix}-{counter:06d}"
            return pod

        after_fill = proc_status(proc.pid)
        window = feasible_nodes_to_find(n)
        start = 0

        def candidates(mode: str) -> bytes | None:
            nonlocal start
            if mode == "all":
                return None
            picked = [names[(start + i) % n] for i in range(window)]
            start = (start + window) % n
            return json.dumps(picked, separators=(",", ":")).encode()

        timings: dict[str, dict[str, float]] = {}
        for mode in ("kube-scheduler", "all"):
            for _ in range(args.warmup):
                wire.probe(next_pod("warmup"), candidates(mode))
            latencies: list[float] = []
            with_json: list[float] = []
            feasible_counts: list[int] = []
            pods: list[dict[str, Any]] = []
            cpu0 = proc_status(proc.pid)["cpu_centis"]
            for _ in range(args.probes):
                pod = next_pod("probe")
                probe = wire.probe(pod, candidates(mode))
                feasible_counts.append(probe.feasible)
                latencies.append(probe.wire)
                with_json.append(probe.with_json)
                pods.append(pod)
            cpu_ms = 10 * (proc_status(proc.pid)["cpu_centis"] - cpu0) / max(1, args.probes)
            prefix = "" if mode == "all" else "ks_"
            timings[mode] = {
                f"{prefix}p50_ms": 1000 * statistics.median(latencies), f"{prefix}p90_ms": 1000 * pct(latencies, 0.9),
                f"{prefix}p99_ms": 1000 * pct(latencies, 0.99), f"{prefix}max_ms": 1000 * max(latencies),
                f"{prefix}cpu_ms_per_probe": cpu_ms, f"{prefix}feasible_median": statistics.median(feasible_counts),
                # the same probes timed with this client's JSON encoding and decoding (the method before 2026-11-26 16:00)
                f"{prefix}client_p50_ms": 1000 * statistics.median(with_json), f"{prefix}client_p99_ms": 1000 * pct(with_json, 0.99),
            }
            slowest = sorted(range(len(latencies)), key=latencies.__getitem__, reverse=True)[: args.slowest]
            for i in slowest:
                print(f"  {mode}: {1000 * latencies[i]:7.2f} ms  {_shape(pods[i])}; {feasible_counts[i]} feasible", flush=True)

        # decided before any is bound, so two pods decided for one node could overfill it: each
        # goes to a node no earlier pod was decided for, while there is one
        decided: list[tuple[dict[str, Any], str]] = []
        taken: set[str] = set()
        while len(decided) < args.binds:
            pod = next_pod("bind")
            feasible = client.ask("filter", pod)["NodeNames"] or []
            if feasible:
                node = next((f for f in feasible if f not in taken), feasible[len(decided) % len(feasible)])
                taken.add(node)
                decided.append((pod, node))
        refused: list[str] = []
        lock = threading.Lock()

        def worker() -> None:
            c = Client(port, [])
            while True:
                with lock:
                    if not decided:
                        return
                    pod, node = decided.pop()
                if error := c.bind(pod, node):
                    with lock:
                        refused.append(error)

        threads = [threading.Thread(target=worker) for _ in range(args.threads)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bind_s = time.perf_counter() - t0
        end = proc_status(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    row = {
        "nodes": n, "gpus": 8 * n, "probes": args.probes, "warmup": args.warmup, "ks_candidates": window,
        **timings["kube-scheduler"], **timings["all"],
        # refused binds are quick: binds/s counts the successful ones
        "binds": args.binds, "binds_per_s": (args.binds - len(refused)) / bind_s, "binds_refused": len(refused), "refused_examples": sorted(set(refused))[:3],
        "rss_after_fill_mib": after_fill["VmRSS"] / 1024, "rss_end_mib": end["VmRSS"] / 1024, "rss_peak_mib": end["VmHWM"] / 1024,
        **info, "load_start": load, "load_end": os.getloadavg()[0],
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    print(
        f"{n} nodes ({8 * n} GPUs): filter+prioritize with {window} candidates (kube-scheduler) p50 {row['ks_p50_ms']:.2f} ms, "
        f"p90 {row['ks_p90_ms']:.2f}, p99 {row['ks_p99_ms']:.2f}, max {row['ks_max_ms']:.1f} ms, CPU {row['ks_cpu_ms_per_probe']:.2f} ms "
        f"(with the client's JSON: p50 {row['ks_client_p50_ms']:.2f}, p99 {row['ks_client_p99_ms']:.2f}); "
        f"all {n} nodes p50 {row['p50_ms']:.2f} ms, p90 {row['p90_ms']:.2f}, p99 {row['p99_ms']:.2f}, "
        f"max {row['max_ms']:.1f} ms, CPU {row['cpu_ms_per_probe']:.2f} ms/probe; median feasible {row['feasible_median']:.0f}; "
        f"{row['binds_per_s']:.0f} binds/s ({len(refused)} refused{': ' + '; '.join(row['refused_examples']) if refused else ''}); RSS {row['rss_after_fill_mib']:.0f} MiB after the fill, "
        f"{row['rss_end_mib']:.0f} at the end (peak {row['rss_peak_mib']:.0f}); fill {info.get('fill_s', 0):.0f} s; "
        f"load {load:.1f} -> {row['load_end']:.1f}",
        flush=True,
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,2500,5000,10000", help="node counts (default 1000,2500,5000,10000)")
    parser.add_argument("--fill", type=float, default=0.9, help="share of GPUs allocated before measuring (default 0.9)")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--probes", type=int, default=1000)
    parser.add_argument("--binds", type=int, default=400)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1, help="runs per size (default 1)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--results", type=Path, default=OUT / "results.json", help="appends a JSON line per run")
    parser.add_argument("--figure", type=Path, default=FIGURE)
    parser.add_argument("--no-replay", action="store_true", help="skip the sim replay part (bench/sim_scale.py)")
    parser.add_argument("--slowest", type=int, default=0, metavar="N", help="list the N slowest probes of each mode with their pod shape")
    args = parser.parse_args()

    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"uptime: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(args.repeat):
        for n in (int(s) for s in args.sizes.split(",")):
            row = measure(n, args)
            with args.results.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
    if not args.no_replay:
        subprocess.run([sys.executable, str(Path(__file__).with_name("sim_scale.py"))], check=True)
    subprocess.run([sys.executable, str(Path(__file__).with_name("scale_plot.py")), "--results", str(args.results), "--figure", str(args.figure)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
