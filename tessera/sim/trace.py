"""Reading workload traces in the openb CSV schema (Alibaba cluster-trace-gpu-v2023).

Nodes: `sn,cpu_milli,memory_mib,gpu,model` and optionally `gpu_mem_mib` (per GPU). Pods:
`name,cpu_milli,memory_mib,num_gpu,gpu_milli` then optionally `gpu_spec` ('|'-separated GPU
models), `qos`, `pod_phase`, `creation_time`, ... and `gpu_mem_mib` (per-GPU memory request).
`gpu_milli` is kept in milli-GPUs, exactly. Nodes without GPUs are skipped (the planner is about
GPU capacity); pods without GPUs are kept (they use CPU and memory on GPU nodes, as in the paper).

Every value is checked, and a bad one is reported as `file:line: message` (`TraceError`): counts
must be whole, numbers finite and not negative, names unique, and a node may not have more GPUs
or more memory per GPU than the largest GPU node of the catalog
(`tessera.model.catalog`): that bound is what keeps a typo such as `gpu=1000000` from
building a million GPU objects. Both files are read line by line; memory grows with the rows kept.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tessera.model.catalog import GPU_MODELS, INSTANCE_TYPES
from tessera.alloc import MILLI_PER_GPU, ContainerRequest, GpuState, InvalidRequest, NodeState, PodRequest, PodUid
from tessera.alloc.model import UNTRACKED
from tessera.sim.csvrows import BadValue, Problems, Row, TraceError, number, read_rows, whole_number

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")

__all__ = ["NODE_COLUMNS", "POD_COLUMNS", "CatalogLimits", "TraceError", "TracePod", "catalog_limits", "load_nodes", "load_pods"]


@dataclass(frozen=True)
class TracePod:
    request: PodRequest
    creation_time: float  # 0 when the trace has no creation_time column


@dataclass(frozen=True)
class CatalogLimits:
    """The largest GPU node the catalog knows: no trace node or pod may go beyond it."""

    gpus_per_node: int
    gpus_instance_type: str  # an instance type with that many GPUs
    gpu_memory_mib: int
    gpu_memory_model: str  # the GPU model with that much memory

    @property
    def gpus_why(self) -> str:
        return f"no GPU node in the catalog has more; the largest, e.g. {self.gpus_instance_type}, has {self.gpus_per_node}"

    @property
    def memory_why(self) -> str:
        return f"no GPU in the catalog has more memory; the largest, {self.gpu_memory_model}, has {self.gpu_memory_mib} MiB"


@cache
def catalog_limits() -> CatalogLimits:
    # max() keeps the first of equals: a confirmed type, the first by name, so messages are stable
    widest = max(sorted(INSTANCE_TYPES.values(), key=lambda s: s.name), key=lambda s: (s.gpu_count, s.confirmed))
    largest = max(GPU_MODELS.values(), key=lambda m: (m.memory_mib, m.name))
    return CatalogLimits(widest.gpu_count, widest.name, largest.memory_mib, largest.name)


def _name(row: Row, column: str, seen: dict[str, int], what: str) -> str:
    name = row.text(column)
    if not name:
        raise BadValue(f"column {column} is empty; every {what} needs a name")
    first = seen.get(name)
    if first is not None:
        raise BadValue(f"{what} {name!r} is already on line {first}; names must be unique")
    seen[name] = row.line
    return name


def _node(row: Row, seen: dict[str, int], limits: CatalogLimits) -> NodeState | None:
    name = _name(row, "sn", seen, "node")
    count = whole_number(row.text("gpu"), "gpu", limit=limits.gpus_per_node, why=limits.gpus_why)
    cpu = whole_number(row.text("cpu_milli"), "cpu_milli")
    memory = whole_number(row.text("memory_mib"), "memory_mib")
    gpu_mem = UNTRACKED
    if row.text("gpu_mem_mib"):
        gpu_mem = whole_number(row.text("gpu_mem_mib"), "gpu_mem_mib", limit=limits.gpu_memory_mib, why=limits.memory_why)
        if gpu_mem == 0:
            raise BadValue("gpu_mem_mib='0': a GPU has memory; leave the cell empty when it is not known")
    if count == 0:
        return None
    model = row.text("model")
    if not model:
        raise BadValue(f"column model is empty on a node with {count} GPU(s); name the GPU model (e.g. T4)")
    gpus = [GpuState(i, f"{name}-gpu{i}", model, gpu_mem) for i in range(count)]
    return NodeState(name, gpus, cpu, memory)


def load_nodes(path: Path) -> list[NodeState]:
    """The GPU nodes of a node CSV. Raises `TraceError` with every problem found (up to 20)."""
    limits = catalog_limits()
    problems = Problems()
    nodes: list[NodeState] = []
    seen: dict[str, int] = {}
    for row in read_rows(path, NODE_COLUMNS, problems):
        try:
            node = _node(row, seen, limits)
        except BadValue as exc:
            problems.add(f"{row.where()}: {exc}")
            continue
        if node is not None:
            nodes.append(node)
    problems.raise_any()
    if not nodes:
        raise TraceError(f"{path}: no node with GPUs (every row has gpu=0, or there are no rows)")
    return nodes


def _models(text: str) -> frozenset[str] | None:
    models = [m.strip() for m in text.split("|")]
    if any(not m for m in models):
        raise BadValue(f"gpu_spec={text!r} has an empty model name; separate models with '|', e.g. V100M16|V100M32")
    return frozenset(models)


def _pod(row: Row, seen: dict[str, int], limits: CatalogLimits) -> TracePod:
    name = _name(row, "name", seen, "pod")
    count = whole_number(row.text("num_gpu"), "num_gpu", limit=limits.gpus_per_node, why=limits.gpus_why)
    milli_text, mem_text = row.text("gpu_milli"), row.text("gpu_mem_mib")
    milli = 0
    if count or milli_text not in ("", "0"):
        milli = whole_number(milli_text, "gpu_milli", limit=MILLI_PER_GPU, why=f"{MILLI_PER_GPU} is one whole GPU")
    gpu_mem = None
    if mem_text:
        gpu_mem = whole_number(mem_text, "gpu_mem_mib", limit=limits.gpu_memory_mib, why=limits.memory_why)
    spec = row.text("gpu_spec")
    created = number(row.text("creation_time"), "creation_time", whole=False) if row.text("creation_time") else 0.0
    try:
        container = ContainerRequest("main", count, milli, gpu_mem)
    except InvalidRequest as exc:
        raise BadValue(f"num_gpu={count}, gpu_milli={milli}: {_request_problem(exc)}") from None
    request = PodRequest(
        PodUid(name),
        (container,),
        whole_number(row.text("cpu_milli"), "cpu_milli"),
        whole_number(row.text("memory_mib"), "memory_mib"),
        _models(spec) if spec else None,
        name=name,
    )
    return TracePod(request, created)


def _request_problem(exc: InvalidRequest) -> str:
    """The model's message without its container name (a trace pod has one container, `main`)."""
    text = str(exc)
    prefix = "container 'main': "
    return text[len(prefix):] if text.startswith(prefix) else text


def load_pods(path: Path) -> list[TracePod]:
    """The pods of a pod CSV, in file order. Raises `TraceError` with every problem (up to 20)."""
    limits = catalog_limits()
    problems = Problems()
    pods: list[TracePod] = []
    seen: dict[str, int] = {}
    for row in read_rows(path, POD_COLUMNS, problems):
        try:
            pods.append(_pod(row, seen, limits))
        except BadValue as exc:
            problems.add(f"{row.where()}: {exc}")
    problems.raise_any()
    if not pods:
        raise TraceError(f"{path}: no pods (the file has a header but no rows)")
    return pods
