"""Prometheus metrics of the node agent, on their own registry, served by `tessera.httpd`.

The agent loop publishes an immutable `AgentView` once per slow tick; the collector turns the
latest view into metric families at scrape time, so scrapes never touch NVML or cgroups and the
loop never pays for metrics it does not serve. Labels: namespace, pod, container, gpu_uuid (and
gpu_index on per-GPU metrics), so per-pod and per-container GPU use can be joined with
kube-state-metrics and with dcgm-exporter's card metrics (same `gpu_uuid` value, its `UUID`).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tessera.httpd import Endpoint, HardenedHTTPServer, HttpLimits, Routes
from tessera.httpd.prometheus import metrics_response

MIB = 1024 * 1024
_CONTAINER_LABELS = ["namespace", "pod", "container", "gpu_uuid"]
_GPU_LABELS = ["gpu_uuid", "gpu_index", "model"]


@dataclass(frozen=True)
class ContainerGpuRow:
    namespace: str
    pod: str
    container: str
    gpu_uuid: str
    app_class: str
    memory_used_mib: int
    memory_limit_mib: int  # 0 = no limit
    core_allocated_pct: int
    sm_utilisation_pct: int
    frozen: bool
    frozen_seconds: float
    throttle_events: int
    memory_kills: int
    memory_warnings: int
    freezes: int
    attribution_pending: bool = False  # some GPU process may be this container's or a sibling's


@dataclass(frozen=True)
class GpuRow:
    uuid: str
    index: int
    model: str
    memory_total_mib: int
    core_allocated_pct: int
    memory_allocated_mib: int
    utilisation_pct: int
    memory_used_mib: int
    healthy: bool
    xid_errors: int
    mps_daemon_running: bool
    mps_restarts: int


@dataclass(frozen=True)
class AgentView:
    containers: tuple[ContainerGpuRow, ...] = ()
    gpus: tuple[GpuRow, ...] = ()
    ticks: int = 0
    tick_seconds_total: float = 0.0
    event_failures: int = 0
    ambiguous_processes: int = 0  # GPU processes no single container can be named for yet


@dataclass
class ViewBox:
    """The latest view, swapped atomically by the loop and read by scrapes.

    Demand-driven: the loop rebuilds the view (the costliest part of a slow tick with hundreds
    of containers) only when a scrape read the previous one, or when it is older than
    `max_age_s`, so an unscraped agent pays nothing and a scraped one is at most one slow tick
    (1 s) stale.
    """

    max_age_s: float = 10.0
    _view: AgentView = field(default_factory=AgentView)
    _read: bool = True
    _built_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, view: AgentView, now: float) -> None:
        with self._lock:
            self._view = view
            self._read = False
            self._built_at = now

    def wanted(self, now: float) -> bool:
        with self._lock:
            return self._read or self._built_at is None or now - self._built_at >= self.max_age_s

    def get(self) -> AgentView:
        with self._lock:
            self._read = True
            return self._view


class AgentCollector:
    def __init__(self, view: Callable[[], AgentView]) -> None:
        self._view = view

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families are built per scrape

    def collect(self) -> Iterator[Metric]:
        v = self._view()
        yield from _container_families(v)
        yield from _gpu_families(v)
        ticks = CounterMetricFamily("tessera_agent_ticks", "Control loop iterations")
        ticks.add_metric([], v.ticks)
        yield ticks
        busy = CounterMetricFamily("tessera_agent_tick_seconds", "CPU-wall time spent inside control loop iterations")
        busy.add_metric([], v.tick_seconds_total)
        yield busy
        failures = CounterMetricFamily("tessera_agent_event_post_failures", "Kubernetes events that could not be posted")
        failures.add_metric([], v.event_failures)
        yield failures
        ambiguous = GaugeMetricFamily(
            "tessera_agent_ambiguous_gpu_processes",
            "GPU processes that could belong to several containers of their pod (container ids not known yet)",
        )
        ambiguous.add_metric([], v.ambiguous_processes)
        yield ambiguous


def _container_families(v: AgentView) -> Iterator[Metric]:
    specs: list[tuple[str, str, str, Callable[[ContainerGpuRow], float]]] = [
        ("gauge", "tessera_container_gpu_memory_used_bytes", "GPU memory used by the container's processes on this GPU", lambda r: r.memory_used_mib * MIB),
        ("gauge", "tessera_container_gpu_memory_limit_bytes", "The container's tessera.dev/gpu-memory on this GPU (0 = no limit)", lambda r: r.memory_limit_mib * MIB),
        ("gauge", "tessera_container_gpu_core_allocated_percent", "The container's tessera.dev/gpu-core on this GPU", lambda r: r.core_allocated_pct),
        ("gauge", "tessera_container_gpu_utilization_percent", "SM utilisation of the container's processes on this GPU", lambda r: r.sm_utilisation_pct),
        ("gauge", "tessera_container_gpu_attribution_pending", "1 while a GPU process may be this container's or a sibling's (runtime ids not known yet); its memory limit is not enforced meanwhile", lambda r: 1.0 if r.attribution_pending else 0.0),
        ("gauge", "tessera_container_frozen", "1 while the agent keeps the container frozen (offline pause or burst throttle)", lambda r: 1.0 if r.frozen else 0.0),
        ("counter", "tessera_container_frozen_seconds", "Seconds the container spent frozen", lambda r: r.frozen_seconds),
        ("counter", "tessera_container_freezes", "Times the container was frozen", lambda r: r.freezes),
        ("counter", "tessera_container_throttle_events", "Times a burst-share container was throttled back to its share", lambda r: r.throttle_events),
        ("counter", "tessera_container_gpu_memory_kills", "Times the container's GPU processes were killed for exceeding gpu-memory", lambda r: r.memory_kills),
        ("counter", "tessera_container_gpu_memory_warnings", "Times the container exceeded gpu-memory on a warn pool", lambda r: r.memory_warnings),
    ]
    for kind, name, doc, value in specs:
        family: Any = GaugeMetricFamily(name, doc, labels=_CONTAINER_LABELS + (["app_class"] if name.endswith("_frozen") else [])) if kind == "gauge" else CounterMetricFamily(name, doc, labels=_CONTAINER_LABELS)
        for row in v.containers:
            labels = [row.namespace, row.pod, row.container, row.gpu_uuid]
            if name.endswith("_frozen"):
                labels.append(row.app_class)
            family.add_metric(labels, value(row))
        yield family


def _gpu_families(v: AgentView) -> Iterator[Metric]:
    specs: list[tuple[str, str, str, Callable[[GpuRow], float]]] = [
        ("gauge", "tessera_gpu_core_allocated_percent", "Sum of gpu-core given to containers on this GPU", lambda g: g.core_allocated_pct),
        ("gauge", "tessera_gpu_memory_allocated_bytes", "Sum of gpu-memory given to containers on this GPU", lambda g: g.memory_allocated_mib * MIB),
        ("gauge", "tessera_gpu_memory_total_bytes", "GPU memory", lambda g: g.memory_total_mib * MIB),
        ("gauge", "tessera_gpu_memory_used_bytes", "GPU memory in use (all processes)", lambda g: g.memory_used_mib * MIB),
        ("gauge", "tessera_gpu_utilization_percent", "Percent of time a kernel ran on the GPU", lambda g: g.utilisation_pct),
        ("gauge", "tessera_gpu_healthy", "1 when the GPU is healthy (no critical Xid, responsive)", lambda g: 1.0 if g.healthy else 0.0),
        ("counter", "tessera_gpu_xid_errors", "Xid errors the driver reported for this GPU", lambda g: g.xid_errors),
        ("gauge", "tessera_gpu_mps_daemon_running", "1 when this GPU's MPS control daemon runs (fixed-share pools)", lambda g: 1.0 if g.mps_daemon_running else 0.0),
        ("counter", "tessera_gpu_mps_daemon_restarts", "Times the agent restarted this GPU's MPS control daemon", lambda g: g.mps_restarts),
    ]
    for kind, name, doc, value in specs:
        family: Any = GaugeMetricFamily(name, doc, labels=_GPU_LABELS) if kind == "gauge" else CounterMetricFamily(name, doc, labels=_GPU_LABELS)
        for g in v.gpus:
            family.add_metric([g.uuid, str(g.index), g.model], value(g))
        yield family


# Scrapes carry no body; 64 connections at once cover several Prometheus replicas, kubelet's probe
# and a burst of curl with room to spare (more wait in the backlog, they are not refused).
METRICS_LIMITS = HttpLimits(max_body_bytes=64 * 1024, max_connections=64, backlog=256)


def serve_metrics(view: Callable[[], AgentView], host: str, port: int) -> tuple[HardenedHTTPServer, threading.Thread, int]:
    """Serve GET /metrics on host:port (port 0 picks a free one); returns (server, thread, port).
    Other paths get 404 and other methods 405, in the JSON shape of `tessera.httpd`; stop with
    `server.stop()`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(view))
    endpoints: dict[str, Mapping[str, Endpoint]] = {"/metrics": {"GET": lambda request: metrics_response(registry, request)}}
    server = HardenedHTTPServer((host, port), Routes(endpoints.get), METRICS_LIMITS, name="agent-metrics")
    thread = server.start()
    return server, thread, server.port
