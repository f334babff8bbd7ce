"""Extender failover under kube-scheduler's load: planned handover (SIGTERM) and a crash (SIGKILL) of
the leader, with the extender replicas as real processes (prints figures; not a test).

    nice python bench/failover.py [--replicas 2] [--nodes 50] [--gpus 8] [--rate 10] [--before 4]
        [--after 12] [--runs 3] [--events planned,kill] [--readiness-delay 4]

The API server is the loopback stand-in (`tessera.kube.loopback`) over an in-memory store; each
replica is `tessera scheduler serve --kubeconfig FILE --leader-elect=true` with the default lease
timing (`tessera.model.leader_election`), reached through an emulated Service: a new connection
goes to a random ready endpoint, kept alive until it breaks. A SIGTERMed pod leaves the endpoints
at once (it is terminating); a SIGKILLed one only when its readiness probe has failed
(`--readiness-delay`, 4 s = the Deployment's readiness period 2 s x failureThreshold 2), and until then a
new connection to it is refused, as kube-proxy would route it to a dead pod IP.

kube-scheduler is the emulator the tests use (`tests/tessera/scheduler/kube_scheduler_emulator.py`,
configured from the rendered KubeSchedulerConfiguration): pods arrive at `--rate` per second; one
scheduling cycle (filter, prioritize) at a time, each binding cycle on a thread of its own, 4 at most
(kube-scheduler binds asynchronously); a pod whose cycle fails is retried with kube-scheduler's
back-off (1 s doubling to 10 s, `podInitialBackoffSeconds` / `podMaxBackoffSeconds`). `--before` seconds after the load starts the
leader gets the event; arrivals go on `--after` seconds more.

Per run it prints: the /bind calls' p99 and max around the event (start of the call to kube-scheduler
having its answer: what a handover adds to a bind), failed scheduling cycles (an extender `Error`, an error status, a connection
error; pods that fitted nowhere are counted apart, as "no fit": kube-scheduler's ordinary retry), bind delay (pod created -> bound) p50 / p99 / max over the pods created from 2 s
before the event until the lease duration + 2 s after it, the time from the event to the first bind
the new leader completes, and the safety audit: GPUs whose records exceed 100 % (double
allocations), bound pods the new leader does not count (lost allocations), the new leader's
/metrics against the records.
"""
from __future__ import annotations

import argparse
import datetime as dt
import http.client
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "tessera" / "scheduler"))  # the kube-scheduler emulator the tests use
sys.path.insert(0, str(ROOT / "tests" / "support"))

from extender_harness import GIB, node_manifest, pod_manifest, rendered_scheduler_config  # noqa: E402
from kube_scheduler_emulator import ExtenderEntry, KubeSchedulerEmulator  # noqa: E402

from tessera.kube.fake import FakeKubeApi  # noqa: E402
from tessera.kube.loopback import LoopbackApiServer  # noqa: E402
from tessera.model.contract import ANNOTATION_ALLOCATION, EXTENDER_LEASE, TESSERA_NAMESPACE, Allocation  # noqa: E402
from tessera.model.leader_election import DEFAULT_LEASE_DURATION_S  # noqa: E402

INITIAL_BACKOFF_S = 1.0
MAX_BACKOFF_S = 10.0
WORKERS = 4


class Replica:
    def __init__(self, kubeconfig: Path, index: int) -> None:
        env = {**os.environ, "POD_NAME": f"tessera-extender-{index}", "POD_NAMESPACE": TESSERA_NAMESPACE}
        command = [
            sys.executable, "-m", "tessera.cli.main", "scheduler", "serve", "--kubeconfig", str(kubeconfig), "--port", "0",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--placement", "fragmentation-aware",
            "--leader-elect=true", "--log-level", "WARNING",
        ]
        self.name = env["POD_NAME"]
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.process.stdout is not None
        banner = self.process.stdout.readline()
        if not banner.startswith("tessera extender on http://127.0.0.1:"):
            raise SystemExit(f"replica {index} did not start: {banner!r}")
        self.port = int(banner.split("http://127.0.0.1:", 1)[1].split(" ", 1)[0])
        self.identity = banner.rsplit(" as ", 1)[1].rstrip(")\n")
        threading.Thread(target=self.process.communicate, daemon=True).start()

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", path)
            reply = conn.getresponse()
            return reply.status, reply.read().decode()
        finally:
            conn.close()

    def metric(self, name: str) -> float:
        text = self.get("/metrics")[1]
        return float(next(line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(name + " ")))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class Service:
    """kube-proxy's view: the ready endpoints; a connection is pinned to one until it breaks."""

    def __init__(self, replicas: Sequence[Replica]) -> None:
        self._ready = {r.port for r in replicas}
        self._lock = threading.Lock()
        self._rng = random.Random(7)

    def remove(self, port: int) -> None:
        with self._lock:
            self._ready.discard(port)

    def pick(self) -> int:
        with self._lock:
            return self._rng.choice(sorted(self._ready))


class ServiceClient:
    """The emulator's `ExtenderClient`, through the Service: reconnects to a random endpoint after
    a connection breaks; a POST on a broken connection fails (Go does not retry it)."""

    def __init__(self, service: Service, timeout_s: float) -> None:
        self._service = service
        self._timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection("127.0.0.1", self._service.pick(), timeout=self._timeout_s)
        return self._conn

    def post_raw(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        conn = self._connection()
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            reply = conn.getresponse()
            data = reply.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self._conn = None
            raise
        if reply.getheader("Connection", "").lower() == "close":
            conn.close()
            self._conn = None
        return reply.status, data

    def post(self, verb: str, payload: Any) -> tuple[int, Any]:
        import json

        status, data = self.post_raw(verb if verb.startswith("/") else "/" + verb, json.dumps(payload).encode())
        return status, json.loads(data) if data else None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


@dataclass
class PodLog:
    name: str
    created: float
    bound: float | None = None
    failures: int = 0


@dataclass
class Load:
    api: FakeKubeApi
    service: Service
    rate: float
    pods: list[PodLog] = field(default_factory=list)
    binds: list[float] = field(default_factory=list)  # monotonic times of successful binds
    bind_calls: list[tuple[float, float]] = field(default_factory=list)  # (start, seconds) of each /bind answered
    failures: list[tuple[float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def _scheduler_loop(load: Load, queue: list[tuple[float, PodLog]], lock: threading.Lock, seed: int) -> None:
    """kube-scheduler: one scheduling cycle at a time (filter, prioritize), each binding cycle on
    its own thread (at most `WORKERS` at once), a failed pod back in the queue after its back-off."""
    entry = ExtenderEntry.from_config(rendered_scheduler_config())
    cycles = KubeSchedulerEmulator(ServiceClient(load.service, entry.http_timeout_s), load.api, entry, seed=seed)  # type: ignore[arg-type]
    binders = threading.BoundedSemaphore(WORKERS)
    running: list[threading.Thread] = []

    def failed(pod: PodLog, error: str) -> None:
        now = time.monotonic()
        pod.failures += 1
        with lock:
            load.failures.append((now, error))
            queue.append((now + min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2 ** (pod.failures - 1)), pod))

    def bind(pod: PodLog, obj: dict[str, Any], attempt: Any, node: str) -> None:
        client = ServiceClient(load.service, entry.http_timeout_s)
        binder = KubeSchedulerEmulator(client, load.api, entry)  # type: ignore[arg-type]
        started = time.monotonic()
        try:
            done = binder.finish(obj, attempt, node)
            error = done.error if done.node is None else ""
        except (OSError, http.client.HTTPException) as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()
            binders.release()
        with lock:
            load.bind_calls.append((started, time.monotonic() - started))
        if error:
            failed(pod, error)
            return
        pod.bound = time.monotonic()
        with lock:
            load.binds.append(pod.bound)

    while True:
        with lock:
            ready = [item for item in queue if item[0] <= time.monotonic()]
            item = min(ready, key=lambda i: i[0]) if ready else None
            if item is not None:
                queue.remove(item)
            idle = item is None and not queue
        if item is None:
            if idle and load.stop.is_set() and not any(t.is_alive() for t in running):
                return
            time.sleep(0.005)
            continue
        _, pod = item
        try:
            obj, attempt, node = cycles.cycle("default", pod.name)
        except (OSError, http.client.HTTPException) as exc:
            failed(pod, f"{type(exc).__name__}: {exc}")
            continue
        if node is None:
            failed(pod, attempt.error or "fits nowhere")
            continue
        binders.acquire()
        thread = threading.Thread(target=bind, args=(pod, obj, attempt, node), daemon=True)
        thread.start()
        running[:] = [t for t in running if t.is_alive()] + [thread]


def _arrivals(load: Load, queue: list[tuple[float, PodLog]], lock: threading.Lock, seconds: float) -> None:
    rng = random.Random(11)
    start = time.monotonic()
    count = 0
    while time.monotonic() - start < seconds:
        name = f"p{count}"
        core = rng.choice([25, 50, 50, 100])
        load.api.create_pod(pod_manifest(name, ("main", core, core * 160)))
        pod = PodLog(name, time.monotonic())
        with lock:
            load.pods.append(pod)
            queue.append((pod.created, pod))
        count += 1
        time.sleep(max(0.0, start + count / load.rate - time.monotonic()))


def _capacity(error: str) -> bool:
    """A pod that did not fit (the cluster full, or a bind racing the next cycle for the last
    share): kube-scheduler's ordinary retry, not a failure of the extender."""
    return error == "fits nowhere" or "does not fit" in error


def _leader(api: FakeKubeApi, replicas: Sequence[Replica]) -> Replica | None:
    try:
        holder = api.get_lease(TESSERA_NAMESPACE, EXTENDER_LEASE)["spec"].get("holderIdentity")
    except Exception:
        return None
    return next((r for r in replicas if r.identity == holder and r.process.poll() is None), None)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _audit(api: FakeKubeApi, gpu_memory_mib: int) -> tuple[int, int, dict[tuple[str, int], int]]:
    """(GPUs over 100 %, bound pods without a record, milli per GPU over the records of live pods)."""
    milli: dict[tuple[str, int], int] = {}
    memory: dict[tuple[str, int], int] = {}
    unrecorded = 0
    for pod in api.list_pods():
        text = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ALLOCATION)
        if not text:
            unrecorded += bool(pod["spec"].get("nodeName"))
            continue
        record = Allocation.from_json(text)
        for shares in record.containers.values():
            for share in shares:
                key = (record.node, share.index)
                milli[key] = milli.get(key, 0) + share.core * 10
                memory[key] = memory.get(key, 0) + share.memory_mib
    over = sum(1 for k in milli if milli[k] > 1000 or memory[k] > gpu_memory_mib)
    return over, unrecorded, milli


def run(args: argparse.Namespace, event: str, run_index: int) -> dict[str, Any]:
    api = FakeKubeApi()
    gpu_memory = 16 * GIB
    for i in range(args.nodes):
        api.create_node(node_manifest(f"n{i:03d}", gpus=args.gpus, memory_mib=gpu_memory))
    server = LoopbackApiServer(api)
    workdir = Path(tempfile.mkdtemp(prefix="tessera-failover-"))
    replicas: list[Replica] = []
    try:
        kubeconfig = server.write_kubeconfig(workdir / "kubeconfig")
        replicas = [Replica(kubeconfig, i) for i in range(args.replicas)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not all(r.get("/readyz")[0] == 200 for r in replicas) or _leader(api, replicas) is None):
            time.sleep(0.1)
        leader = _leader(api, replicas)
        if leader is None:
            raise SystemExit("no leader was elected")
        service = Service(replicas)
        load = Load(api, service, args.rate)
        queue: list[tuple[float, PodLog]] = []
        lock = threading.Lock()
        workers = [threading.Thread(target=_scheduler_loop, args=(load, queue, lock, run_index), daemon=True)]
        for w in workers:
            w.start()
        arrivals = threading.Thread(target=_arrivals, args=(load, queue, lock, args.before + args.after), daemon=True)
        arrivals.start()
        time.sleep(args.before)
        event_at = time.monotonic()
        if event == "planned":
            service.remove(leader.port)  # terminating: out of the endpoints at once
            leader.process.send_signal(signal.SIGTERM)
        else:
            leader.process.send_signal(signal.SIGKILL)
            threading.Timer(args.readiness_delay, service.remove, args=(leader.port,)).start()
        arrivals.join()
        load.stop.set()
        for w in workers:
            w.join(120)
        if event == "planned":
            leader.process.wait(30)
        successor = _leader(api, replicas)
        window = (event_at - 2.0, event_at + DEFAULT_LEASE_DURATION_S + 2.0)
        delays = [p.bound - p.created for p in load.pods if p.bound is not None and window[0] <= p.created <= window[1]]
        steady = [p.bound - p.created for p in load.pods if p.bound is not None and p.created < window[0]]
        calls = [d for t, d in load.bind_calls if window[0] <= t <= window[1]]
        after = [t for t in load.binds if t > event_at]
        over, unrecorded, milli = _audit(api, gpu_memory)
        counted = successor.metric("tessera_extender_allocated_gpu") if successor else float("nan")
        return {
            "event": event,
            "pods": len(load.pods),
            "bound": sum(1 for p in load.pods if p.bound is not None),
            "failed_cycles": sum(1 for _, e in load.failures if not _capacity(e)),
            "failed_around": sum(1 for t, e in load.failures if window[0] <= t <= window[1] and not _capacity(e)),
            "no_fit": sum(1 for _, e in load.failures if _capacity(e)),
            "failure_kinds": sorted({e.split(":")[0][:60] for _, e in load.failures}),
            "p50": _percentile(delays, 0.5),
            "p99": _percentile(delays, 0.99),
            "max": max(delays) if delays else float("nan"),
            "steady_p99": _percentile(steady, 0.99),
            "bind_p99": _percentile(calls, 0.99),
            "bind_max": max(calls) if calls else float("nan"),
            "resume": (min(after) - event_at) if after else float("nan"),
            "double": over,
            "lost": unrecorded,
            "counted": counted,
            "recorded": sum(milli.values()) / 1000,
            "new_leader": successor.name if successor else None,
            "old_leader": leader.name,
        }
    finally:
        for r in replicas:
            r.stop()
        server.close()
        api.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rate", type=float, default=10.0, help="pods per second")
    parser.add_argument("--before", type=float, default=4.0, help="seconds of load before the event")
    parser.add_argument("--after", type=float, default=12.0, help="seconds of arrivals after the event")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", default="planned,kill")
    parser.add_argument("--readiness-delay", type=float, default=4.0, help="seconds a SIGKILLed endpoint stays in the Service")
    args = parser.parse_args(argv)
    print(f"# bench/failover.py, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
          f"{args.replicas} replicas, {args.nodes} nodes x {args.gpus} GPUs, {args.rate:g} pods/s, lease {DEFAULT_LEASE_DURATION_S:g} s")
    print()
    print(
        "| event | run | pods | bound | failed cycles (around event) | no fit | /bind call p99 / max around event (s) | "
        "pod created -> bound p50 / p99 / max around event (s) | same p99 before (s) | first bind after event (s) | double | lost | "
        "leader counts / records (GPUs) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for event in args.events.split(","):
        for i in range(args.runs):
            r = run(args, event, i)
            print(
                f"| {event} | {i + 1} | {r['pods']} | {r['bound']} | {r['failed_cycles']} ({r['failed_around']}) | {r['no_fit']} | "
                f"{r['bind_p99']:.3f} / {r['bind_max']:.3f} | {r['p50']:.3f} / {r['p99']:.3f} / {r['max']:.3f} | {r['steady_p99']:.3f} | "
                f"{r['resume']:.2f} | {r['double']} | {r['lost']} | "
                f"{r['counted']:.2f} / {r['recorded']:.2f} |",
                flush=True,
            )
            if r["failure_kinds"]:
                print(f"<!-- failures: {r['failure_kinds']}; old leader {r['old_leader']}, new {r['new_leader']} -->", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
