"""Synthetic clusters and traces built from the shipped openb files (used by bench/scale.py).

- `eight_gpu_nodes(n)`: n nodes of 8 GPUs each. The openb node list has 617 nodes with 8 GPUs
  (549 G2, 39 G3, 21 V100M32, 8 V100M16, each with its CPU and memory); node i is a copy of the
  (i mod 617)-th of them in a seeded shuffled order, renamed `scale-node-NNNNN`. So every 617
  consecutive nodes hold the openb 8-GPU shapes in their proportions.
- `replicated_nodes(k)`: the whole openb node list k times (1213 k nodes, 6212 k GPUs; 1, 2, 4 and
  8 GPUs per node as in the trace), copy c of `openb-node-0042` named `openb-node-0042-cC`.
- `replicated_pods(k)`: the default pod trace k times, copy c of a pod named `<name>-cC` with the
  same request and creation time, so the k-times trace has exactly the default trace's mix of
  shapes and, ordered by creation time, its arrival pattern with every pod arriving k times.

Files are written in the openb schema, so `tessera scheduler serve --simulate` and `tessera sim
replay` read them as they read the originals.
"""
from __future__ import annotations

import csv
import random
from pathlib import Path

TRACES = Path(__file__).resolve().parent / "traces" / "openb"
NODES_CSV = TRACES / "openb_node_list_gpu_node.csv"
PODS_CSV = TRACES / "openb_pod_list_default.csv"


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def _write(path: Path, header: list[str], rows: list[dict[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def eight_gpu_nodes(n: int, out: Path, *, seed: int = 42, source: Path = NODES_CSV) -> Path:
    header, rows = _rows(source)
    shapes = [r for r in rows if r["gpu"] == "8"]
    random.Random(seed).shuffle(shapes)
    nodes = [{**shapes[i % len(shapes)], "sn": f"scale-node-{i:05d}"} for i in range(n)]
    return _write(out / f"nodes-8gpu-{n}.csv", header, nodes)


def replicated_nodes(k: int, out: Path, *, source: Path = NODES_CSV) -> Path:
    header, rows = _rows(source)
    nodes = [{**r, "sn": f"{r['sn']}-c{c}"} for c in range(k) for r in rows]
    return _write(out / f"nodes-openb-x{k}.csv", header, nodes)


def replicated_pods(k: int, out: Path, *, source: Path = PODS_CSV) -> Path:
    header, rows = _rows(source)
    pods = [{**r, "name": f"{r['name']}-c{c}"} for c in range(k) for r in rows]
    return _write(out / f"pods-default-x{k}.csv", header, pods)
