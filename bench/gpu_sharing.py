"""What the GPU checks' targets rest on, measured on a lent GPU machine (docs/benchmarks.md, "GPU checks").

    python3 bench/gpu_sharing.py [nvml] [sweep] [pairs] [--pairs 60/30,61/31] [--out DIR]

- nvml: how NVML's per-process utilisation samples see an online job that bursts next to a
  continuous offline one (time-sliced, no MPS): the driver's sample period, which process each
  sample names, and how long after each burst start the online job first shows up;
- sweep: one MPS daemon, clients at 100..10 % CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: the SMs each one
  sees, its throughput alone (fp32 4096; bf16/fp32 8192 for 100/60/30), and 60/30-style pairs at once;
- pairs: the given percentage pairs at once (fp32 4096 twice, fp32 and bf16 8192 once), e.g.
  60/30 (what a plain percent gives) against 61/31 (Tessera's whole-TPC rounding on an H100).
Writes gpu-sharing.json to --out (default $OUT or out/gpu-sharing) and prints each figure.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

CLIENT = Path(__file__).with_name("gpu_mps_client.py")
NO_MPS = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/tessera-bench-no-mps-daemon"}  # a pipe directory no daemon serves


class Client:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, str(CLIENT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **env}, bufsize=1)
        self.info: dict[str, Any] = {}

    def ready(self) -> dict[str, Any]:
        self.info = self.recv()
        return self.info

    def send(self, **order: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(order) + "\n")
        self.proc.stdin.flush()

    def recv(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"client {self.proc.pid} ended (exit {self.proc.wait()})")
        return dict(json.loads(line))

    def quit(self) -> None:
        try:
            self.send(quit=True)
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def together(clients: list[Client], seconds: float, size: int = 4096, dtype: str = "float32", **extra: Any) -> list[dict[str, Any]]:
    for c in clients:
        c.send(size=size, dtype=dtype, prep=True)
    for c in clients:
        c.recv()
    start = time.monotonic() + 0.3
    for c in clients:
        c.send(size=size, dtype=dtype, start=start, end=start + seconds, **extra)
    return [c.recv() for c in clients]


class MpsDaemon:
    def __init__(self, root: Path) -> None:
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(root / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(root / "log")}
        for path in self.env.values():
            Path(path).mkdir(parents=True, exist_ok=True)
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env={**os.environ, **self.env}, check=True)

    def client(self, percentage: int) -> Client:
        return Client({**self.env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percentage)})

    def stop(self) -> None:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env={**os.environ, **self.env}, timeout=20, check=False)


def sweep(report: dict[str, Any]) -> None:
    daemon = MpsDaemon(Path("/tmp/tessera-bench-mps-sweep"))
    percentages = [100, 80, 70, 60, 50, 40, 34, 30, 25, 20, 10]
    native, clients = Client(NO_MPS), {p: daemon.client(p) for p in percentages}
    out: dict[str, Any] = report.setdefault("sweep", {"sms": {}, "alone": {}, "alone_other": {}, "pairs": {}})
    try:
        out["sms"]["native"] = native.ready()["sms"]
        for p, c in clients.items():
            out["sms"][p] = c.ready()["sms"]
        out["alone"]["native"] = together([native], 1.5)[0]["rate"]
        for p, c in clients.items():
            out["alone"][p] = together([c], 1.5)[0]["rate"]
            print(f"sweep: {p:3d} % -> {out['sms'][p]:3d} SMs, {out['alone'][p]:7.1f} fp32 4096 products/s alone", flush=True)
        for size, dtype in ((8192, "float32"), (4096, "bfloat16"), (8192, "bfloat16")):
            for p in (100, 60, 30):
                out["alone_other"][f"{p}-{size}-{dtype}"] = together([clients[p]], 1.5, size, dtype)[0]["rate"]
            out["alone_other"][f"native-{size}-{dtype}"] = together([native], 1.5, size, dtype)[0]["rate"]
        for a, b, size, dtype in ((60, 30, 4096, "float32"), (60, 30, 8192, "float32"), (60, 30, 8192, "bfloat16"),
                                  (70, 34, 4096, "float32"), (50, 25, 4096, "float32"), (40, 20, 4096, "float32")):
            ra, rb = together([clients[a], clients[b]], 4.0, size, dtype)
            out["pairs"][f"{a}/{b}-{size}-{dtype}"] = [ra["rate"], rb["rate"], ra["rate"] / rb["rate"]]
            print(f"sweep: {a}/{b} {dtype} {size} at once: ratio {ra['rate'] / rb['rate']:.3f}", flush=True)
    finally:
        for c in [native, *clients.values()]:
            c.quit()
        daemon.stop()


def pairs(report: dict[str, Any], wanted: list[tuple[int, int]]) -> None:
    daemon = MpsDaemon(Path("/tmp/tessera-bench-mps-pairs"))
    percentages = sorted({p for pair in wanted for p in pair}, reverse=True)
    clients = {p: daemon.client(p) for p in percentages}
    out: dict[str, Any] = report.setdefault("pairs", {"sms": {}, "alone": {}, "pairs": {}})
    try:
        for p, c in clients.items():
            out["sms"][p] = c.ready()["sms"]
        for p, c in clients.items():
            out["alone"][p] = together([c], 1.5)[0]["rate"]
        print(f"pairs: SMs {out['sms']}, fp32 4096 alone {out['alone']}", flush=True)
        for rep in range(2):
            for a, b in wanted:
                for size, dtype in ((4096, "float32"), (8192, "float32"), (8192, "bfloat16")):
                    if rep and size != 4096:
                        continue
                    ra, rb = together([clients[a], clients[b]], 4.0, size, dtype)
                    out["pairs"][f"{a}/{b}-{size}-{dtype}-{rep}"] = [ra["rate"], rb["rate"], ra["rate"] / rb["rate"]]
                    print(f"pairs: {a}/{b} {dtype} {size} run {rep + 1}: ratio {ra['rate'] / rb['rate']:.3f}", flush=True)
    finally:
        for c in clients.values():
            c.quit()
        daemon.stop()


def nvml(report: dict[str, Any]) -> None:
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    online, offline = Client(NO_MPS), Client(NO_MPS)
    seen: dict[tuple[int, int], tuple[float, int]] = {}  # (pid, sample timestamp us) -> (when seen, SM %)
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                samples = pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
            except pynvml.NVMLError:
                samples = []
            now = time.monotonic()
            for s in samples:
                seen.setdefault((int(s.pid), int(s.timeStamp)), (now, int(s.smUtil)))
            time.sleep(0.01)

    try:
        for c in (online, offline):
            c.ready()
            c.send(size=4096, dtype="float32", prep=True)
            c.recv()
        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(2.0)
        start = time.monotonic() + 0.3
        offline.send(size=4096, dtype="float32", start=start, end=start + 9.0)
        online.send(size=4096, dtype="float32", start=start + 1.0, end=start + 8.5, pattern=[1.2, 1.3])
        online.recv(), offline.recv()
        stop.set()
        poller.join()
    finally:
        online.quit()
        offline.quit()
    wall_minus_mono = time.time() - time.monotonic()
    names = {online.proc.pid: "online", offline.proc.pid: "offline"}
    rows = sorted((stamp / 1e6 - wall_minus_mono, names.get(pid, str(pid)), util, when) for (pid, stamp), (when, util) in seen.items())
    bursts = [start + 1.0 + k * 2.5 for k in range(3)]
    first = [next((round((st - b) * 1000, 1) for st, who, util, _ in rows if who == "online" and util >= 5 and st >= b - 0.05), None) for b in bursts]
    stamps = sorted({round(st, 4) for st, *_ in rows})
    steps = sorted(round((y - x) * 1000, 1) for x, y in zip(stamps, stamps[1:]))
    per_stamp: dict[float, set[str]] = {}
    for st, who, *_ in rows:
        per_stamp.setdefault(round(st, 4), set()).add(who)
    report["nvml"] = {"sample_step_ms_median": steps[len(steps) // 2] if steps else None, "processes_per_sample_max": max((len(v) for v in per_stamp.values()), default=0),
                      "online_first_seen_after_burst_start_ms": first,
                      "samples": [[round(st - start, 3), who, util] for st, who, util, _ in rows]}
    print(f"nvml: sample step {report['nvml']['sample_step_ms_median']} ms, at most {report['nvml']['processes_per_sample_max']} process(es) "
          f"per sample, online first seen {first} ms after its bursts began", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="*", metavar="{nvml,sweep,pairs}", help="what to measure (default: all three)")
    parser.add_argument("--pairs", default="60/30,61/31", help="percentage pairs for `pairs` (default 60/30,61/31)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out/gpu-sharing")))
    args = parser.parse_args()
    unknown = [p for p in args.parts if p not in ("nvml", "sweep", "pairs")]
    if unknown:
        parser.error(f"unknown part {unknown[0]!r}: choose from nvml, sweep, pairs")
    try:
        wanted = [(int(a), int(b)) for a, b in (p.split("/") for p in args.pairs.split(","))]
    except ValueError:
        parser.error(f"--pairs {args.pairs!r}: write A/B[,A/B...], for example 60/30,61/31")
    report: dict[str, Any] = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.mkdir(parents=True, exist_ok=True)
    for part in args.parts or ["nvml", "sweep", "pairs"]:
        {"nvml": lambda: nvml(report), "sweep": lambda: sweep(report), "pairs": lambda: pairs(report, wanted)}[part]()
        (args.out / "gpu-sharing.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"report: {args.out / 'gpu-sharing.json'}")


if __name__ == "__main__":
    main()
