"""Reading workload traces in the openb CSV schema (Alibaba cluster-trace-gpu-v2023).

Nodes: `sn,cpu_milli,memory_mib,gpu,model` and optionally `gpu_mem_mib` (per GPU). Pods:
`name,cpu_milli,memory_mib,num_gpu,gpu_milli` then optionally `gpu_spec` ('|'-separated GPU
models), `qos`, `pod_phase`, `creation_time`, ... and `gpu_mem_mib` (per-GPU memory request).
`gpu_milli` is kept in milli-GPUs, exactly. Nodes without GPUs are skipped (the planner is about
GPU capacity); pods without GPUs are kept (they use CPU and memory on GPU nodes, as in the paper).
"""
from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tessera.alloc import MILLI_PER_GPU, ContainerRequest, GpuState, InvalidRequest, NodeState, PodRequest, PodUid
from tessera.alloc.model import UNTRACKED

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """The trace file cannot be used; the message names the file, line and what to fix."""


@dataclass(frozen=True)
class TracePod:
    request: PodRequest
    creation_time: int  # 0 when the trace has no creation_time column


def _rows(path: Path, required: tuple[str, ...]) -> Iterable[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}; expected at least {','.join(required)}")
        for line, row in enumerate(reader, start=2):
            yield line, row


def _int(path: Path, line: int, row: dict[str, str], column: str, default: int | None = None) -> int:
    text = (row.get(column) or "").strip()
    if not text:
        if default is not None:
            return default
        raise TraceError(f"{path}:{line}: column {column} is empty")
    try:
        return int(float(text))
    except ValueError:
        raise TraceError(f"{path}:{line}: column {column}={text!r} is not a number") from None


def load_nodes(path: Path) -> list[NodeState]:
    nodes: list[NodeState] = []
    for line, row in _rows(path, NODE_COLUMNS):
        count = _int(path, line, row, "gpu")
        if count <= 0:
            continue
        name = row["sn"].strip()
        model = (row.get("model") or "").strip() or "unknown"
        gpu_mem = _int(path, line, row, "gpu_mem_mib", 0) or UNTRACKED
        gpus = [GpuState(i, f"{name}-gpu{i}", model, gpu_mem) for i in range(count)]
        nodes.append(NodeState(name, gpus, _int(path, line, row, "cpu_milli"), _int(path, line, row, "memory_mib")))
    if not nodes:
        raise TraceError(f"{path}: no node with GPUs")
    return nodes


def load_pods(path: Path) -> list[TracePod]:
    pods: list[TracePod] = []
    for line, row in _rows(path, POD_COLUMNS):
        count = _int(path, line, row, "num_gpu")
        milli = _int(path, line, row, "gpu_milli") if count else 0
        if count > 1 and milli != MILLI_PER_GPU:
            # The trace's multi-GPU pods always take whole GPUs; a share across GPUs is not a shape
            # any scheduler in the paper supports, so it is rounded up to whole GPUs.
            milli = MILLI_PER_GPU
        mem_text = (row.get("gpu_mem_mib") or "").strip()
        gpu_mem = _int(path, line, row, "gpu_mem_mib") if mem_text and count else None
        spec = (row.get("gpu_spec") or "").strip()
        models = frozenset(m for m in spec.split("|") if m) or None
        try:
            container = ContainerRequest("main", count, milli, gpu_mem)
            request = PodRequest(
                PodUid(row["name"].strip()),
                (container,),
                _int(path, line, row, "cpu_milli", 0),
                _int(path, line, row, "memory_mib", 0),
                models,
                name=row["name"].strip(),
            )
        except InvalidRequest as exc:
            raise TraceError(f"{path}:{line}: {exc}") from None
        pods.append(TracePod(request, _int(path, line, row, "creation_time", 0)))
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods
