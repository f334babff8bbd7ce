"""One CUDA client of `bench/gpu_sharing.py`: PyTorch matrix products on command, one JSON line each.

Prints {"ready": pid, "sms": <SMs this process sees>, "pct": <its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE>}
once CUDA is up; then reads commands from stdin, one JSON object per line:
  {"size": N, "dtype": "float32"|"bfloat16", "prep": true}      allocate and warm up, answer {"prepped": ...}
  {"size": N, "dtype": D, "start": t0, "end": t1[, "pattern": [on, off]][, "keep": true]}
        work from t0 to t1 (time.monotonic()), answer {"n": products, "rate": per second, "first": end of the first batch}
  {"quit": true}
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch


def main() -> None:
    props = torch.cuda.get_device_properties(0)
    print(json.dumps({"ready": os.getpid(), "sms": props.multi_processor_count, "pct": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}), flush=True)
    mats: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    for line in sys.stdin:
        order = json.loads(line)
        if order.get("quit"):
            break
        key = (int(order["size"]), str(order["dtype"]))
        if key not in mats:
            dtype = getattr(torch, key[1])
            a, b, c = (torch.randn(key[0], key[0], device="cuda", dtype=dtype) for _ in range(3))
            for _ in range(3):
                torch.mm(a, b, out=c)
            torch.cuda.synchronize()
            mats[key] = (a, b, c)
        if order.get("prep"):
            print(json.dumps({"prepped": list(key)}), flush=True)
            continue
        a, b, c = mats[key]
        start, end = float(order["start"]), float(order["end"])
        on, off = order.get("pattern") or (0.0, 0.0)
        while time.monotonic() < start:
            time.sleep(0.001)
        done, ends, batch = 0, [], int(order.get("batch", 4))
        while (now := time.monotonic()) < end:
            if on and (now - start) % (on + off) >= on:  # idle part of a burst pattern
                time.sleep(max(0.0, min(on + off - (now - start) % (on + off), end - now)))
                continue
            for _ in range(batch):
                torch.mm(a, b, out=c)
            torch.cuda.synchronize()
            done += batch
            ends.append(time.monotonic())
        elapsed = (ends[-1] if ends else end) - start
        print(json.dumps({"n": done, "rate": done / max(elapsed, 1e-9), "first": ends[0] if ends else None, "ends": ends if order.get("keep") else None}), flush=True)


if __name__ == "__main__":
    main()
