"""HTTP latency and throughput of Tessera's servers at 1, 16 and 64 concurrent clients, with and
without keep-alive (prints a markdown table; asserts nothing).

    nice python bench/http_load.py [--targets extender-filter,extender-healthz,webhook,agent-metrics]
        [--clients 1,16,64] [--seconds 5] [--repeat 1] [--generator wrk|asyncio] [--nodes CSV]

Every server runs in its own process, as in production: the extender as `tessera scheduler serve
--simulate NODES.csv`, the webhook (HTTPS, a generated certificate) and the node agent's /metrics
(a fixed view of 8 GPUs x 32 containers) through this script's `--serve`. The load generator is
another process: `wrk` (Debian package `wrk`; C, epoll, not the bottleneck) when it is on PATH,
else a Python asyncio client (`--generator asyncio`; it needs a core of its own). Without
keep-alive every request opens a new TCP (and for the webhook TLS) connection, and its latency
includes that. Latency is per request as the client sees it; throughput is answers per second.

Targets: `extender-filter` is kube-scheduler's /filter with NodeNames (nodeCacheCapable) for every
node of the CSV (1213 for openb: ~20 KB each way), the same pod each time, so the figure is the HTTP
path plus JSON plus a warm evaluation; `extender-healthz` is kubelet's probe (it sums the cache's
GPUs: 6212 for openb); `extender-404` is the server alone (framing, routing, a JSON error); `webhook` is one
AdmissionReview of a qGPU pod (the most work per review); `agent-metrics` a gzip scrape.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_REPO_TRACES = Path(__file__).parent / "traces" / "openb"
TARGETS = ("extender-filter", "extender-healthz", "extender-404", "webhook", "agent-metrics")


@dataclass(frozen=True)
class Target:
    name: str
    scheme: str
    port: int
    method: str
    path: str
    body: bytes
    headers: dict[str, str]
    expect: int = 200


@dataclass
class Cell:
    target: str
    clients: int
    keep_alive: bool
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    server_cpu_s: float

    def row(self) -> str:
        ka = "yes" if self.keep_alive else "no"
        rate = self.requests / self.seconds if self.seconds else 0.0
        cpu = 1000 * self.server_cpu_s / self.requests if self.requests else 0.0
        return f"| {self.target} | {self.clients} | {ka} | {self.p50_ms:.2f} | {self.p99_ms:.2f} | {rate:.0f} | {self.errors} | {cpu:.2f} |"


# --- servers (each in its own process) -----------------------------------------------------------


def _serve_webhook(ca_file: Path) -> None:
    from tessera.webhook.server import ServerSettings, serve
    from tessera.webhook.settings import WebhookSettings
    from tessera.webhook.tls import generate_bundle

    bundle = generate_bundle(("localhost",), dt.datetime.now(dt.timezone.utc))
    ca_file.write_text(bundle.ca_pem)
    settings = WebhookSettings(shared_pools=frozenset({"a"}), qgpu_alias_pools=frozenset({"a"}))
    serve(ServerSettings(host="127.0.0.1", port=0), settings, bundle, ready=lambda s: print(f"port {s.port}", flush=True))


def _serve_agent_metrics() -> None:
    from tessera_node.agent.metrics import AgentView, ContainerGpuRow, GpuRow, serve_metrics

    gpus = tuple(GpuRow(f"GPU-{i}", i, "H100", 81920, 90, 60000, 70, 50000, True, 0, True, 0) for i in range(8))
    rows = tuple(
        ContainerGpuRow("ns", f"pod-{g}-{c}", "main", f"GPU-{g}", "online" if c < 4 else "offline", 1000, 2048, 3, 5, c >= 28, 1.5, 0, 0, 0, 1)
        for g in range(8)
        for c in range(32)
    )
    view = AgentView(rows, gpus, ticks=100, tick_seconds_total=0.5)
    _server, thread, port = serve_metrics(lambda: view, "127.0.0.1", 0)
    print(f"port {port}", flush=True)
    thread.join()


def _start(cmd: list[str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for _ in range(5):
        line = proc.stdout.readline()
        match = re.search(r"(?:port |:)(\d+)\b", line)
        if match:
            return proc, int(match.group(1))
    proc.kill()
    raise SystemExit(f"server did not start: {cmd}")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_targets(names: list[str], nodes_csv: Path, workdir: Path) -> tuple[list[subprocess.Popen[str]], dict[str, tuple[Target, int]]]:
    procs: list[subprocess.Popen[str]] = []
    out: dict[str, tuple[Target, int]] = {}
    if any(n.startswith("extender") for n in names):
        from tessera.sim.trace import load_nodes

        proc, port = _start([sys.executable, "-m", "tessera.cli.main", "scheduler", "serve", "--simulate", str(nodes_csv), "--port", "0", "--log-level", "WARNING"])
        procs.append(proc)
        pod = {
            "metadata": {"name": "bench-pod", "namespace": "bench", "uid": "bench-uid", "annotations": {}},
            "spec": {"schedulerName": "tessera-scheduler", "containers": [{"name": "main", "resources": {"limits": {"tessera.dev/gpu-core": "25", "tessera.dev/gpu-memory": "4096"}}}]},
        }
        names_list = [n.name for n in load_nodes(nodes_csv)]
        body = json.dumps({"Pod": pod, "NodeNames": names_list}, separators=(",", ":")).encode()
        out["extender-filter"] = (Target("extender-filter", "http", port, "POST", "/filter", body, {"Content-Type": "application/json"}), proc.pid)
        out["extender-healthz"] = (Target("extender-healthz", "http", port, "GET", "/healthz", b"", {}), proc.pid)
        out["extender-404"] = (Target("extender-404", "http", port, "POST", "/nowhere", b'{"Pod": null}', {"Content-Type": "application/json"}, 404), proc.pid)
    if "webhook" in names:
        ca = workdir / "ca.pem"
        proc, port = _start([sys.executable, __file__, "--serve", "webhook", "--ca-file", str(ca)])
        procs.append(proc)
        sys.path.insert(0, str(Path(__file__).parent))
        from webhook_latency import _review

        out["webhook"] = (Target("webhook", "https", port, "POST", "/mutate", _review(1), {"Content-Type": "application/json"}), proc.pid)
    if "agent-metrics" in names:
        proc, port = _start([sys.executable, __file__, "--serve", "agent-metrics"])
        procs.append(proc)
        out["agent-metrics"] = (Target("agent-metrics", "http", port, "GET", "/metrics", b"", {"Accept-Encoding": "gzip"}), proc.pid)
    return procs, {k: v for k, v in out.items() if k in names}


# --- load generators (each in its own process) ---------------------------------------------------


def _raw_request(target: Target, keep_alive: bool) -> bytes:
    headers = {"Host": "localhost", **target.headers}
    if target.body:
        headers["Content-Length"] = str(len(target.body))
    if not keep_alive:
        headers["Connection"] = "close"
    head = f"{target.method} {target.path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode() + target.body


async def _client(
    host: str, port: int, tls: ssl.SSLContext | None, raw: bytes, keep_alive: bool, expect: bytes, until: float, out: list[float], errors: list[str]
) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    while time.perf_counter() < until:
        t0 = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port, ssl=tls, server_hostname="localhost" if tls else None)
            assert reader is not None
            writer.write(raw)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
            await reader.readexactly(length)
            if not head.startswith(expect):
                errors.append(head.split(b"\r\n", 1)[0].decode())
            out.append(time.perf_counter() - t0)
        except (OSError, asyncio.IncompleteReadError, AttributeError) as exc:
            errors.append(type(exc).__name__)
            writer = None
        if not keep_alive and writer is not None:
            writer.close()
            writer = None


def _asyncio_load(args: argparse.Namespace) -> None:
    raw = Path(args.request_file).read_bytes()
    tls = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
    latencies: list[float] = []
    errors: list[str] = []

    async def run() -> float:
        start = time.perf_counter()
        until = start + args.seconds
        await asyncio.gather(*(_client("127.0.0.1", args.port, tls, raw, args.keep_alive, f"HTTP/1.1 {args.expect}".encode(), until, latencies, errors) for _ in range(args.clients)))
        return time.perf_counter() - start

    elapsed = asyncio.run(run())
    latencies.sort()
    print(json.dumps({"requests": len(latencies), "errors": len(errors), "seconds": elapsed, "p50": _pct(latencies, 0.5), "p99": _pct(latencies, 0.99)}))


def _pct(values: list[float], q: float) -> float:
    return 1000 * values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


def _wrk(target: Target, clients: int, keep_alive: bool, seconds: float, workdir: Path) -> dict[str, Any]:
    script = workdir / "wrk.lua"
    body_file = workdir / "body.bin"
    body_file.write_bytes(target.body)
    headers = dict(target.headers)
    if not keep_alive:
        headers["Connection"] = "close"
    lines = [f'wrk.method = "{target.method}"']
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    if target.body:
        lines.append(f'local f = io.open("{body_file}", "rb"); wrk.body = f:read("*a"); f:close()')
    script.write_text("\n".join(lines) + "\n")
    url = f"{target.scheme}://127.0.0.1:{target.port}{target.path}"
    cmd = ["wrk", "-t", str(min(clients, 2)), "-c", str(clients), "-d", f"{max(1, round(seconds))}s", "--timeout", "30s", "--latency", "-s", str(script), url]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"wrk failed ({done.returncode}): {done.stdout}{done.stderr}")
    text = done.stdout

    def ms(label: str) -> float:
        match = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\b", text, re.M)
        if not match:
            return 0.0
        return float(match.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2)]

    requests = int(re.search(r"(\d+) requests in ([\d.]+)(ms|s)", text).group(1))  # type: ignore[union-attr]
    socket_errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
    non_2xx = int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", text)) else 0
    if target.expect != 200:
        non_2xx = 0  # every answer is the expected error (wrk cannot tell which status it saw)
    return {"requests": requests, "errors": socket_errors + non_2xx, "seconds": max(1, round(seconds)), "p50": ms("50"), "p99": ms("99")}


def measure(target: Target, pid: int, clients: int, keep_alive: bool, seconds: float, generator: str, workdir: Path) -> Cell:
    cpu0 = _cpu_seconds(pid)
    if generator == "wrk":
        result = _wrk(target, clients, keep_alive, seconds, workdir)
    else:
        request_file = workdir / "request.bin"
        request_file.write_bytes(_raw_request(target, keep_alive))
        cmd = [sys.executable, __file__, "--load", "--port", str(target.port), "--clients", str(clients), "--seconds", str(seconds), "--request-file", str(request_file), "--expect", str(target.expect)]
        if keep_alive:
            cmd.append("--keep-alive")
        if target.scheme == "https":
            cmd += ["--ca-file", str(workdir / "ca.pem")]
        result = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    cpu = _cpu_seconds(pid) - cpu0
    return Cell(target.name, clients, keep_alive, result["requests"], result["errors"], result["seconds"], result["p50"], result["p99"], cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--generator", choices=["wrk", "asyncio"], default="wrk" if shutil.which("wrk") else "asyncio")
    parser.add_argument("--nodes", type=Path, default=_REPO_TRACES / "openb_node_list_gpu_node.csv")
    # child modes
    parser.add_argument("--serve", choices=["webhook", "agent-metrics"], help=argparse.SUPPRESS)
    parser.add_argument("--ca-file", help=argparse.SUPPRESS)
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--request-file", help=argparse.SUPPRESS)
    parser.add_argument("--keep-alive", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--expect", type=int, default=200, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "webhook":
        _serve_webhook(Path(args.ca_file))
        return 0
    if args.serve == "agent-metrics":
        _serve_agent_metrics()
        return 0
    if args.load:
        args.clients = int(args.clients)
        _asyncio_load(args)
        return 0

    names = [n for n in args.targets.split(",") if n]
    unknown = sorted(set(names) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {', '.join(TARGETS)}")
    client_counts = [int(c) for c in args.clients.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the servers too (finally below)
    with tempfile.TemporaryDirectory(prefix="tessera-http-load-") as tmp:
        workdir = Path(tmp)
        procs, targets = start_targets(names, args.nodes, workdir)
        try:
            print(f"generator: {args.generator}; {args.seconds:g} s per cell; started {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; "
                  f"load average at start {os.getloadavg()[0]:.1f}")
            print("| target | clients | keep-alive | p50 ms | p99 ms | requests/s | errors | server CPU ms/request |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- |")
            for _ in range(args.repeat):
                for name in names:
                    target, pid = targets[name]
                    measure(target, pid, 4, True, 1.0, args.generator, workdir)  # warm-up, not reported
                    for clients in client_counts:
                        for keep_alive in (True, False):
                            print(measure(target, pid, clients, keep_alive, args.seconds, args.generator, workdir).row(), flush=True)
            loads = os.getloadavg()
            print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                  f"load average {loads[0]:.1f} / {loads[1]:.1f} / {loads[2]:.1f} (1/5/15 min) at the end")
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
