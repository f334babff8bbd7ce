"""The CUDA worker of the GPU checks: one process, PyTorch and the standard library only.

    python worker_main.py '<json spec>'

Spec keys: parent (pid: the worker dies with it), size (matmul edge, default 4096), batch
(matmuls per synchronize, default 8), hold_mib (device memory held for the whole run),
pattern ([on, off] seconds: work in bursts; absent: work the whole time), probe_mib (instead of
working: allocate up to this many MiB in chunk_mib steps and report where allocation failed),
grow_mib (allocate this much more at the start instant: goes over a memory limit at a known time).

Protocol on stdout, one JSON object per line: {"ready": pid, ...} once CUDA is up and warm; then
it reads one line {"start": t0, "end": t1} (monotonic seconds) from stdin, works from t0 to t1 and
prints {"batches": [end time of each batch], ...}. Errors go to stderr and a non-zero exit.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

MIB = 1024 * 1024


def die_with_parent(parent: int) -> None:
    """PR_SET_PDEATHSIG: the kernel kills this worker when the orchestrator dies, whatever kills it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:  # the parent died before prctl took effect
        sys.exit(3)


def probe(spec: dict) -> None:
    import torch as t

    dev = t.device("cuda")
    free, total = t.cuda.mem_get_info(dev)
    chunk = int(spec.get("chunk_mib", 128))
    target = int(spec["probe_mib"])
    held = []
    got = 0
    error = None
    while got + chunk <= target:
        try:
            held.append(t.empty(chunk * MIB, dtype=t.uint8, device=dev))
            t.cuda.synchronize()
            got += chunk
        except RuntimeError as exc:  # torch.cuda.OutOfMemoryError is a RuntimeError
            error = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            break
    print(json.dumps({
        "probe": {"allocated_mib": got, "asked_mib": target, "chunk_mib": chunk, "error": error,
                  "out_of_memory": error is not None and "out of memory" in error.lower(),
                  "visible_free_mib": free // MIB, "visible_total_mib": total // MIB},
        "pid": os.getpid(),
    }), flush=True)


def main() -> int:
    spec = json.loads(sys.argv[1])
    die_with_parent(int(spec.get("parent", 0)))
    import torch

    if not torch.cuda.is_available():
        print("worker: torch.cuda.is_available() is False", file=sys.stderr)
        return 4
    if spec.get("probe_mib"):
        probe(spec)
        return 0
    dev = torch.device("cuda")
    size, batch = int(spec.get("size", 4096)), int(spec.get("batch", 8))
    a = torch.randn(size, size, device=dev)
    b = torch.randn(size, size, device=dev)
    c = torch.empty(size, size, device=dev)
    hold_mib = int(spec.get("hold_mib", 0))
    hold = torch.ones(hold_mib * MIB, dtype=torch.uint8, device=dev) if hold_mib else None
    for _ in range(3):  # load the cuBLAS kernels before the clock starts
        for _ in range(batch):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
    print(json.dumps({"ready": os.getpid(), "device": torch.cuda.get_device_name(dev),
                      "held_mib": hold_mib if hold is not None else 0}), flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the orchestrator gave up on this run
    order = json.loads(line)
    start, end = float(order["start"]), float(order["end"])
    pattern = spec.get("pattern")
    on, off = (float(pattern[0]), float(pattern[1])) if pattern else (0.0, 0.0)
    wait = start - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    grow_mib = int(spec.get("grow_mib", 0))
    held = [hold, torch.ones(grow_mib * MIB, dtype=torch.uint8, device=dev) if grow_mib else None]
    ends = []
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if pattern:
            phase = (now - start) % (on + off)
            if phase >= on:
                time.sleep(max(0.0, min(on + off - phase, end - now)))
                continue
        for _ in range(batch):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        ends.append(round(time.monotonic(), 6))
    print(json.dumps({"batches": ends, "per_batch": batch, "size": size, "pid": os.getpid(),
                      "held_mib": hold_mib + grow_mib if held else 0}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
