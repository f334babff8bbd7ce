"""Slow and idle clients above the connection cap against Tessera's servers: how long one
well-behaved client waits while N hostile connections of one kind are held open (prints a
markdown table; asserts nothing).

    nice python bench/slow_clients.py [--targets extender-filter,webhook,agent-metrics]
        [--kinds silent,head,body,no-read,tls-hello] [--counts 300,1000,3000] [--seconds 8]
        [--httpd working,REV] [--nodes CSV]

Servers run each in its own process, started by `bench/http_load.py`'s `start_targets` (the
extender as `tessera scheduler serve --simulate NODES.csv`, the webhook over HTTPS, the node
agent's /metrics). `--httpd` names the server code to measure: `working` is this working tree;
a git revision runs the same processes with `tessera/httpd/` taken from that revision (`git
show`, into a temporary copy of `tessera/` and `node-agent/tessera_node/`), so the server before
a change is measured against the same endpoints.

The hostile clients run in one asyncio process (`--hostile`), which keeps N connections of one
kind open: when the server closes one, it opens another after 0.5-1.5 s, as slowloris tools do.
Kinds: `silent` connects and sends nothing; `head` sends part of a request head, then one more
header byte a second; `body` sends a whole head announcing 100,000 bytes, then one body byte a
second; `no-read` (4 KiB receive buffer) sends one request (for an unknown path: a complete
request costs the server real work, and this measures holding, not load) and never reads the
reply, which then waits in the kernel's buffers; `tls-hello` (webhook only) sends the first bytes of a ClientHello and
nothing more. Over TLS, `head`, `body` and `no-read` finish the handshake first.

The well-behaved client sends one request at a time on a new connection each (the case a
connection cap hurts: it must get in), 50 ms apart, for `--seconds` after the hostile process
has opened its connections: kube-scheduler's /filter (every node's name), one AdmissionReview,
a gzip scrape. Latency is from connect to the last byte of the reply; a request fails on any
error, a status other than 200, or no reply within 15 s.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import http.client
import json
import os
import platform
import random
import resource
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # absolute: servers may start elsewhere
from http_load import Target, start_targets  # noqa: E402

_REPO = Path(__file__).resolve().parents[1]
_NODES = _REPO / "bench" / "traces" / "openb" / "openb_node_list_gpu_node.csv"
TARGETS = ("extender-filter", "webhook", "agent-metrics")
KINDS = ("silent", "head", "body", "no-read", "tls-hello")
_REQUEST_TIMEOUT_S = 15.0
_TCP_ESTABLISHED = 1  # tcpi_state, the first byte of Linux's struct tcp_info


# --- the hostile process -----------------------------------------------------------------------


def _established(sock: socket.socket) -> bool:
    """Still open both ways; False once the server has closed it (or asyncio has, after the
    server ended a TLS session)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    except OSError:
        return False
    return bool(struct.unpack("B", info[:1])[0] == _TCP_ESTABLISHED)


async def _hold(kind: str, port: int, tls: ssl.SSLContext | None, stop: asyncio.Event, counts: dict[str, int]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        if kind == "no-read":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        writer: asyncio.StreamWriter | None = None
        try:
            await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), 10)
            counts["connects"] += 1
            use_tls = tls if kind in ("head", "body", "no-read") else None
            _reader, stream = await asyncio.wait_for(
                asyncio.open_connection(sock=sock, ssl=use_tls, server_hostname="localhost" if use_tls else None), 10
            )
            writer = stream
            first = {
                "silent": b"",
                "head": b"POST /filter HTTP/1.1\r\nHost: localhost\r\nX-Pad: ",
                "body": b"POST /filter HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n",
                "no-read": b"GET /hostile-no-read HTTP/1.1\r\nHost: localhost\r\n\r\n",
                "tls-hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            }[kind]
            if first:
                stream.write(first)
            while not stop.is_set() and _established(sock):
                await _pause(stop, 1.0)
                if kind in ("head", "body"):
                    stream.write(b"a")
            counts["cut"] += 0 if stop.is_set() else 1
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            counts["failed"] += 1
        finally:
            if writer is not None:
                writer.transport.abort()
            sock.close()
        await _pause(stop, random.uniform(0.5, 1.5))


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass


def _hostile_main(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.count + 1024)), hard))
    tls = None
    if args.ca_file:
        tls = ssl.create_default_context(cafile=args.ca_file)
    counts = {"connects": 0, "cut": 0, "failed": 0}

    def restart_counts() -> None:
        counts.update({key: 0 for key in counts})

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, restart_counts)  # the parent starts measuring
        loop.add_signal_handler(signal.SIGINT, stop.set)  # the parent is done measuring
        tasks = []
        for _ in range(args.count):
            tasks.append(asyncio.create_task(_hold(args.kind, args.port, tls, stop, counts)))
            await asyncio.sleep(0.001)  # open them over a few seconds, not as one SYN burst
        print("ready", flush=True)
        await asyncio.gather(*tasks)

    asyncio.run(run())
    print(json.dumps(counts), flush=True)


# --- the well-behaved client and the table -----------------------------------------------------------


@dataclass
class Cell:
    httpd: str
    target: str
    kind: str
    count: int
    latencies: list[float]
    failed: int
    hostile: dict[str, int]

    def row(self) -> str:
        ordered = sorted(self.latencies)

        def at(q: float) -> str:
            return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.1f}" if ordered else "-"

        top = f"{1000 * ordered[-1]:.1f}" if ordered else "-"
        return (
            f"| {self.httpd} | {self.target} | {self.kind} | {self.count} | {len(self.latencies) + self.failed} | {at(0.5)} | {at(0.99)} | {top} | "
            f"{self.failed} | {self.hostile.get('connects', 0)} / {self.hostile.get('cut', 0)} / {self.hostile.get('failed', 0)} |"
        )


def _one_request(target: Target, tls: ssl.SSLContext | None) -> float | None:
    started = time.perf_counter()
    conn: http.client.HTTPConnection
    if tls is not None:
        conn = http.client.HTTPSConnection("localhost", target.port, context=tls, timeout=_REQUEST_TIMEOUT_S)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=_REQUEST_TIMEOUT_S)
    try:
        conn.request(target.method, target.path, body=target.body or None, headers={**target.headers, "Connection": "close"})
        response = conn.getresponse()
        response.read()
        return time.perf_counter() - started if response.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _well_behaved(target: Target, tls: ssl.SSLContext | None, seconds: float) -> tuple[list[float], int]:
    latencies: list[float] = []
    failed = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        latency = _one_request(target, tls)
        if latency is None:
            failed += 1
        else:
            latencies.append(latency)
        time.sleep(0.05)
    return latencies, failed


def measure(httpd: str, target: Target, kind: str, count: int, seconds: float, ca_file: Path | None) -> Cell:
    tls = ssl.create_default_context(cafile=str(ca_file)) if target.scheme == "https" and ca_file else None
    hostile: dict[str, int] = {}
    proc: subprocess.Popen[str] | None = None
    if count:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--hostile", kind, "--port", str(target.port), "--count", str(count)]
        if tls is not None and ca_file is not None:
            cmd += ["--ca-file", str(ca_file)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready": every connection has been started
        time.sleep(2.0)  # and has reached the server (or its backlog)
        proc.send_signal(signal.SIGUSR1)  # count the hostile connections of the window only
    try:
        latencies, failed = _well_behaved(target, tls, seconds)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                out, _ = proc.communicate(timeout=30)
                hostile = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
            except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
                proc.kill()
                proc.wait()
    time.sleep(2.0)  # the server lets go of the hostile connections before the next cell
    return Cell(httpd, target.name, kind, count, latencies, failed, hostile)


# --- server code of another revision ---------------------------------------------------------------------


@contextmanager
def httpd_from(revision: str) -> Iterator[dict[str, str]]:
    """Environment for server processes: this working tree, or `tessera/httpd/` from `revision`
    over a copy of the rest (read with `git show`; git's state is not touched). The processes
    also start in the copy: `python -m` puts the working directory before PYTHONPATH."""
    if revision == "working":
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="tessera-httpd-") as tmp:
        root = Path(tmp)
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(_REPO / "tessera", root / "tessera", ignore=ignore)
        shutil.copytree(_REPO / "node-agent" / "tessera_node", root / "node-agent" / "tessera_node", ignore=ignore)
        shutil.rmtree(root / "tessera" / "httpd")
        (root / "tessera" / "httpd").mkdir()
        listing = subprocess.run(["git", "ls-tree", "--name-only", revision, "tessera/httpd/"], cwd=_REPO, capture_output=True, text=True, check=True)
        for name in listing.stdout.split():
            source = subprocess.run(["git", "show", f"{revision}:{name}"], cwd=_REPO, capture_output=True, check=True).stdout
            (root / name).write_bytes(source)
        yield {"PYTHONPATH": f"{root}{os.pathsep}{root / 'node-agent'}", "PWD": str(root)}


@contextmanager
def _environment(extra: dict[str, str]) -> Iterator[None]:
    """`extra` in the environment (and its PWD as the working directory) while the servers start."""
    saved = {k: os.environ.get(k) for k in extra}
    cwd = os.getcwd()
    os.environ.update(extra)
    os.chdir(extra.get("PWD", cwd))
    try:
        yield
    finally:
        os.chdir(cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--counts", default="300,1000,3000")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--httpd", default="working", help="comma-separated: working and/or git revisions")
    parser.add_argument("--nodes", type=Path, default=_NODES)
    parser.add_argument("--hostile", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ca-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hostile:
        args.kind = args.hostile
        _hostile_main(args)
        return 0
    names = [n for n in args.targets.split(",") if n]
    unknown = sorted(set(names) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {', '.join(TARGETS)}")
    kinds = [k for k in args.kinds.split(",") if k]
    nodes = args.nodes.resolve()
    counts = [int(c) for c in args.counts.split(",") if c]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))  # servers inherit it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    print(f"started {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; load average at start {os.getloadavg()[0]:.1f}; "
          f"{args.seconds:g} s of well-behaved requests per cell")
    print("| server | target | hostile kind | hostile connections | requests | p50 ms | p99 ms | max ms | failed | hostile connections made / cut by the server / failed to set up, in the window |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for httpd in [h for h in args.httpd.split(",") if h]:
        with httpd_from(httpd) as env, _environment(env), tempfile.TemporaryDirectory(prefix="tessera-slow-") as tmp:
            procs, targets = start_targets(names, nodes, Path(tmp))
            try:
                for name in names:
                    target, _pid = targets[name]
                    ca = Path(tmp) / "ca.pem" if target.scheme == "https" else None
                    print(measure(httpd, target, "none", 0, args.seconds, ca).row(), flush=True)
                    for kind in kinds:
                        if kind == "tls-hello" and target.scheme != "https":
                            continue
                        for count in counts:
                            print(measure(httpd, target, kind, count, args.seconds, ca).row(), flush=True)
            finally:
                for proc in procs:
                    proc.terminate()
                    proc.wait(30)
    loads = os.getloadavg()
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {loads[0]:.1f} / {loads[1]:.1f} / {loads[2]:.1f} (1/5/15 min) at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
