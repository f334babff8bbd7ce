"""`tessera sim replay` time on the default trace and on a 10x synthetic cluster (prints figures).

    nice python bench/sim_scale.py [--factors 1,10] [--orders creation,shuffle] [--repeat 1]

Runs the real CLI (`tessera sim replay --nodes N.csv --pods P.csv --order O --no-progress`) in a
subprocess and reports its wall time and CPU time (the child's utime + stime), for:

- 1x: the shipped openb node list (1213 nodes, 6212 GPUs) and default pod trace (8152 pods);
- Fx (`--factors`): the node list F times (F x 1213 nodes, 1, 2, 4 and 8 GPUs per node as in the trace) and the
  default trace F times (`bench/synthetic.py`: copy c of every pod, renamed, same request and
  creation time, so the mix of shapes is the default trace's exactly).

`--order creation` (the CLI's default) replays pods by creation time, so the F copies of a pod
arrive one after another; `--order shuffle` (the FGD paper's method, seed 42) mixes them. Both use
`--inflate 1.0` (the CLI default: topped up to 100 % of capacity with sampled pods). Results are
appended to bench/out/scale/replay.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import NODES_CSV, PODS_CSV, replicated_nodes, replicated_pods  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "scale"


def run(label: str, nodes: Path, pods: Path, order: str, policy: str | None) -> dict[str, object]:
    cmd = [sys.executable, "-m", "tessera.cli.main", "sim", "replay", "--nodes", str(nodes), "--pods", str(pods),
           "--order", order, "--no-progress", "--json"]
    if policy:
        cmd += ["--policy", policy]
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU and peak RSS
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {stderr[-500:]}")
    result = json.loads(stdout)
    summary = re.search(r": (\d+) GPU nodes, (\d+) GPUs;.*\n\s+arrived (\d+) pods", stderr)
    if summary is None:
        raise SystemExit(f"unexpected replay summary: {stderr[:500]}")
    cpu = usage.ru_utime + usage.ru_stime
    row = {
        "label": label, "order": order, "policy": policy or "default", "nodes": int(summary.group(1)), "pods": int(summary.group(3)),
        "capacity_gpus": int(summary.group(2)), "allocated_pct": result["points"][-1]["allocated_pct"],
        "seconds": seconds, "cpu_seconds": cpu, "peak_rss_mib": usage.ru_maxrss / 1024,
        "load_start": load, "load_end": os.getloadavg()[0], "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    print(f"replay {label} ({order}): {row['nodes']} nodes, {row['pods']} pods, allocated {row['allocated_pct']} %: "
          f"{seconds:.1f} s wall, {cpu:.1f} s CPU; load {load:.1f} -> {row['load_end']:.1f}", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--factors", default="1,10", help="cluster and trace sizes to replay, in copies of openb (default 1,10)")
    parser.add_argument("--orders", default="creation,shuffle")
    parser.add_argument("--policy", default=None, help="default: the production default policy")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--results", type=Path, default=OUT / "replay.json")
    args = parser.parse_args()
    sizes = []
    for k in (int(f) for f in args.factors.split(",")):
        sizes.append((f"{k}x", NODES_CSV, PODS_CSV) if k == 1 else (f"{k}x", replicated_nodes(k, OUT), replicated_pods(k, OUT)))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(args.repeat):
        for order in args.orders.split(","):
            for label, nodes, pods in sizes:
                row = run(label, nodes, pods, order, args.policy)
                with args.results.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
