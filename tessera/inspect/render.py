"""Rendering an `Inspection`: aligned text tables for people, a stable JSON document for scripts.

The JSON schema (`schemaVersion` 1) is documented in docs/operations.md; fields are only ever
added. Absent values (an unlabelled pool, no sharing policy label, no stranded figure) are null.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from tessera.model.contract import GPU_CORE, GPU_MEMORY
from tessera.inspect.views import (
    ContainerShare,
    FlaggedPod,
    GpuView,
    Inspection,
    PendingPod,
    Pool,
    ResourceUse,
    SharedNode,
    Totals,
    WholeGpuNode,
)

SCHEMA_VERSION: Final = 1


# --- JSON -------------------------------------------------------------------------------------------
def _or_none(text: str | None) -> str | None:
    return text or None


def _totals(t: Totals) -> dict[str, Any]:
    return {
        "gpus": t.gpus,
        "unhealthyGpus": t.unhealthy_gpus,
        "coreAllocated": t.core_allocated,
        "coreCapacity": t.core_capacity,
        "memoryAllocatedMiB": t.memory_allocated_mib,
        "memoryCapacityMiB": t.memory_capacity_mib,
        "pods": t.pods,
        "strandedGpu": t.stranded_gpu,
    }


def _resource(r: ResourceUse) -> dict[str, Any]:
    return {"name": r.name, "allocatable": r.allocatable, "requested": r.requested}


def _share(s: ContainerShare) -> dict[str, Any]:
    return {
        "namespace": s.namespace,
        "pod": s.pod,
        "container": s.container,
        "core": s.core,
        "memoryMiB": s.memory_mib,
        "appClass": s.app_class,
        "phase": s.phase,
        "bound": s.bound,
    }


def _gpu(g: GpuView) -> dict[str, Any]:
    return {
        "index": g.index,
        "uuid": g.uuid,
        "model": g.model,
        "memoryMiB": g.memory_mib,
        "healthy": g.healthy,
        "coreAllocated": g.core_allocated,
        "memoryAllocatedMiB": g.memory_allocated_mib,
        "pods": g.pods,
        "stranded": g.stranded,
        "overcommitted": g.overcommitted,
        "containers": [_share(s) for s in g.shares],
    }


def to_document(ins: Inspection) -> dict[str, Any]:
    """The JSON document (`tessera inspect -o json`); every pod share is included."""
    return {
        "schemaVersion": SCHEMA_VERSION,
        "source": ins.source,
        "filters": {"nodes": list(ins.node_filter), "pools": list(ins.pool_filter)},
        "totals": _totals(ins.totals),
        "pools": [
            {
                "name": _or_none(p.name),
                "kind": _or_none(p.kind),
                "nodes": p.nodes,
                "pods": p.pods,
                "totals": _totals(p.totals),
                "resources": [_resource(r) for r in p.resources],
            }
            for p in ins.pools
        ],
        "sharedNodes": [
            {
                "name": n.name,
                "pool": _or_none(n.pool),
                "kind": _or_none(n.kind),
                "status": n.status,
                "sharingPolicy": _or_none(n.sharing_policy),
                "gpuPlacement": _or_none(n.gpu_placement),
                "problem": n.problem,
                "totals": _totals(n.totals),
                "gpus": [_gpu(g) for g in n.gpus],
            }
            for n in ins.shared_nodes
        ],
        "wholeGpuNodes": [
            {
                "name": n.name,
                "pool": _or_none(n.pool),
                "kind": _or_none(n.kind),
                "status": n.status,
                "pods": n.pods,
                "resources": [_resource(r) for r in n.resources],
            }
            for n in ins.whole_gpu_nodes
        ],
        "flaggedPods": [
            {"namespace": f.namespace, "pod": f.pod, "node": _or_none(f.node), "reason": f.reason.value, "detail": f.detail} for f in ins.flagged
        ],
        "pendingPods": [{"namespace": p.namespace, "pod": p.pod, "core": p.core, "memoryMiB": p.memory_mib} for p in ins.pending],
    }


def render_json(ins: Inspection) -> str:
    return json.dumps(to_document(ins), indent=2) + "\n"


# --- tables -----------------------------------------------------------------------------------------
def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    return [indent + "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [headers, *rows]]


def _pct(part: int, whole: int) -> str:
    return f"{round(100 * part / whole)}%" if whole else "-"


def _used(part: int, whole: int) -> str:
    return f"{part}/{whole} ({_pct(part, whole)})"


def _dash(text: str | None) -> str:
    return text or "-"


def _gpu_row(g: GpuView) -> list[str]:
    notes = [n for n, on in (("overcommitted", g.overcommitted), ("stranded", g.stranded)) if on]
    return [
        str(g.index),
        g.model,
        f"{g.core_allocated}/100",
        f"{g.memory_allocated_mib}/{g.memory_mib}",
        str(g.pods),
        "healthy" if g.healthy else "UNHEALTHY",
        ", ".join(notes),
    ]


def _share_row(s: ContainerShare) -> list[str]:
    return [
        str(s.gpu_index),
        f"{s.namespace}/{s.pod}",
        s.container,
        str(s.core),
        str(s.memory_mib) if s.memory_mib else "-",
        _dash(s.app_class),
        s.phase,
        "bound" if s.bound else "reserved",
    ]


def _totals_line(t: Totals) -> str:
    parts = [
        f"gpu-core {_used(t.core_allocated, t.core_capacity)}",
        f"gpu-memory {t.memory_allocated_mib}/{t.memory_capacity_mib} MiB ({_pct(t.memory_allocated_mib, t.memory_capacity_mib)})",
        f"{t.pods} pod{'s' if t.pods != 1 else ''}",
    ]
    if t.unhealthy_gpus:
        parts.append(f"{t.unhealthy_gpus} unhealthy GPU{'s' if t.unhealthy_gpus != 1 else ''} not counted")
    if t.stranded_gpu is not None:
        parts.append(f"stranded {t.stranded_gpu:.2f} GPU")
    return ", ".join(parts)


def _node_block(n: SharedNode, details: bool) -> list[str]:
    policy = "/".join(p for p in (n.sharing_policy, n.gpu_placement) if p)
    kind = n.kind or "shared"
    header = f"NODE {n.name}  pool {_dash(n.pool)}  {kind}{f' ({policy})' if policy else ''}  {n.status}"
    if n.problem:
        return [header, f"  {n.problem}"]
    lines = [header]
    lines += _table(["GPU", "MODEL", "CORE %", "MEMORY MiB", "PODS", "HEALTH", "NOTES"], [_gpu_row(g) for g in n.gpus], "  ")
    lines.append(f"  total: {_totals_line(n.totals)}")
    shares = [s for g in n.gpus for s in g.shares]
    if details and shares:
        lines.append("")
        lines += _table(["GPU", "POD", "CONTAINER", "CORE %", "MEMORY MiB", "CLASS", "PHASE", "STATE"], [_share_row(s) for s in shares], "  ")
    return lines


def _whole_rows(nodes: Sequence[WholeGpuNode]) -> list[list[str]]:
    rows: list[list[str]] = []
    for n in nodes:
        resources = n.resources or (ResourceUse("-", 0, 0),)
        for i, r in enumerate(resources):
            head = [n.name, _dash(n.pool), _dash(n.kind), n.status, str(n.pods)] if i == 0 else ["", "", "", "", ""]
            rows.append(head + [r.name, f"{r.requested}/{r.allocatable}" if r.name != "-" else "-"])
    return rows


def _pool_rows(pools: Sequence[Pool]) -> list[list[str]]:
    rows: list[list[str]] = []
    for p in pools:
        lines: list[tuple[str, str, str, str]] = []
        t = p.totals
        if t.gpus:
            stranded = "-" if t.stranded_gpu is None else f"{t.stranded_gpu:.2f}"
            lines.append((GPU_CORE, f"{t.core_allocated}/{t.core_capacity}", _pct(t.core_allocated, t.core_capacity), stranded))
            lines.append((GPU_MEMORY, f"{t.memory_allocated_mib}/{t.memory_capacity_mib} MiB", _pct(t.memory_allocated_mib, t.memory_capacity_mib), ""))
        lines += [(r.name, f"{r.requested}/{r.allocatable}", _pct(r.requested, r.allocatable), "") for r in p.resources]
        for i, (resource, used, pct, stranded) in enumerate(lines or [("-", "-", "-", "")]):
            head = [_dash(p.name), _dash(p.kind), str(p.nodes), str(p.pods)] if i == 0 else ["", "", "", ""]
            rows.append(head + [resource, used, pct, stranded])
    return rows


def _flag_rows(flagged: Sequence[FlaggedPod]) -> list[list[str]]:
    return [[f"{f.namespace}/{f.pod}", _dash(f.node), f.reason.value, f.detail] for f in flagged]


def _pending_lines(pending: Sequence[PendingPod], details: bool) -> list[str]:
    if not pending:
        return []
    lines = [f"PENDING: {len(pending)} pod{'s' if len(pending) != 1 else ''} waiting for shared GPUs" + ("" if details else " (-d lists them)")]
    if details:
        rows = [[f"{p.namespace}/{p.pod}", str(p.core), str(p.memory_mib) if p.memory_mib else "-"] for p in pending]
        lines += _table(["POD", "CORE %", "MEMORY MiB"], rows, "  ")
    return lines


def render_table(ins: Inspection, *, details: bool = False) -> str:
    """What a person reads: one table per shared node, whole-GPU nodes, pools, flagged pods."""
    blocks: list[list[str]] = []
    if not ins.shared_nodes and not ins.whole_gpu_nodes:
        blocks.append(["No GPU nodes: no node has a tessera.dev/gpus annotation, a tessera.dev/pool-kind label or nvidia.com/* resources."])
    for node in ins.shared_nodes:
        blocks.append(_node_block(node, details))
    if ins.whole_gpu_nodes:
        headers = ["NODE", "POOL", "KIND", "STATUS", "PODS", "RESOURCE", "REQUESTED/ALLOCATABLE"]
        blocks.append(["WHOLE-GPU NODES", *_table(headers, _whole_rows(ins.whole_gpu_nodes))])
    if ins.pools:
        headers = ["POOL", "KIND", "NODES", "PODS", "RESOURCE", "ALLOCATED", "USE", "STRANDED GPU"]
        blocks.append(["POOLS", *_table(headers, _pool_rows(ins.pools))])
    if ins.shared_nodes:
        blocks.append([f"Shared GPUs: {ins.totals.gpus} GPUs, {_totals_line(ins.totals)}"])
    if ins.flagged:
        blocks.append(["FLAGGED PODS", *_table(["POD", "NODE", "REASON", "DETAIL"], _flag_rows(ins.flagged))])
    if pending := _pending_lines(ins.pending, details):
        blocks.append(pending)
    scope = [f"node {', '.join(ins.node_filter)}"] if ins.node_filter else []
    scope += [f"pool {', '.join(ins.pool_filter)}"] if ins.pool_filter else []
    head = f"Source: {ins.source}" + (f" (only {'; '.join(scope)})" if scope else "")
    return "\n\n".join("\n".join(block) for block in [[head], *blocks]) + "\n"
