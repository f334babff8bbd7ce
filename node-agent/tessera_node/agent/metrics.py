"""Prometheus metrics of the node agent, on their own registry, served by `tessera.httpd`.

The agent loop publishes an immutable `AgentView` once per slow tick; the collector turns the
latest view into metric families at scrape time, so scrapes never touch NVML or cgroups and the
loop never pays for metrics it does not serve. Labels: namespace, pod, container, gpu_uuid (and
gpu_index on per-GPU metrics), so per-pod and per-container GPU use can be joined with
kube-state-metrics and with dcgm-exporter's card metrics (same `gpu_uuid` value, its `UUID`).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from tessera.httpd import HardenedHTTPServer
from tessera.httpd.prometheus import serve_metrics as serve_registry

from tessera.model.metrics import agent as m
from tessera.model.metrics.spec import MetricSpec

MIB = 1024 * 1024
# Freezing a cgroup takes microseconds to tens of milliseconds (processes inside a GPU call settle
# first); the online work waits for it, so the buckets resolve that range.
PAUSE_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True)
class LatencyCounts:
    """An immutable histogram: observations per bucket of `PAUSE_BUCKETS` (last slot: above all)."""

    counts: tuple[int, ...] = (0,) * (len(PAUSE_BUCKETS) + 1)
    total_seconds: float = 0.0

    def observe(self, seconds: float) -> LatencyCounts:
        slot = next((i for i, bound in enumerate(PAUSE_BUCKETS) if seconds <= bound), len(PAUSE_BUCKETS))
        counts = tuple(c + 1 if i == slot else c for i, c in enumerate(self.counts))
        return LatencyCounts(counts, self.total_seconds + max(seconds, 0.0))

    def cumulative(self) -> list[tuple[str, float]]:
        """(upper bound, observations at or below it), `+Inf` last: the exposition's buckets."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*(str(b) for b in PAUSE_BUCKETS), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


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
    online_wakes: tuple[tuple[str, int], ...] = (("wake", 0), ("confirmed", 0), ("unconfirmed", 0))
    pause_latency: LatencyCounts = field(default_factory=LatencyCounts)


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


_ContainerValue = Callable[[ContainerGpuRow], float]
_GpuValue = Callable[[GpuRow], float]

CONTAINER_METRICS: Final[tuple[tuple[MetricSpec, _ContainerValue], ...]] = (
    (m.CONTAINER_GPU_MEMORY_USED_BYTES, lambda r: r.memory_used_mib * MIB),
    (m.CONTAINER_GPU_MEMORY_LIMIT_BYTES, lambda r: r.memory_limit_mib * MIB),
    (m.CONTAINER_GPU_CORE_ALLOCATED_PERCENT, lambda r: r.core_allocated_pct),
    (m.CONTAINER_GPU_UTILIZATION_PERCENT, lambda r: r.sm_utilisation_pct),
    (m.CONTAINER_GPU_ATTRIBUTION_PENDING, lambda r: 1.0 if r.attribution_pending else 0.0),
    (m.CONTAINER_FROZEN, lambda r: 1.0 if r.frozen else 0.0),
    (m.CONTAINER_FROZEN_SECONDS, lambda r: r.frozen_seconds),
    (m.CONTAINER_FREEZES, lambda r: r.freezes),
    (m.CONTAINER_THROTTLE_EVENTS, lambda r: r.throttle_events),
    (m.CONTAINER_GPU_MEMORY_KILLS, lambda r: r.memory_kills),
    (m.CONTAINER_GPU_MEMORY_WARNINGS, lambda r: r.memory_warnings),
)

GPU_METRICS: Final[tuple[tuple[MetricSpec, _GpuValue], ...]] = (
    (m.GPU_CORE_ALLOCATED_PERCENT, lambda g: g.core_allocated_pct),
    (m.GPU_MEMORY_ALLOCATED_BYTES, lambda g: g.memory_allocated_mib * MIB),
    (m.GPU_MEMORY_TOTAL_BYTES, lambda g: g.memory_total_mib * MIB),
    (m.GPU_MEMORY_USED_BYTES, lambda g: g.memory_used_mib * MIB),
    (m.GPU_UTILIZATION_PERCENT, lambda g: g.utilisation_pct),
    (m.GPU_HEALTHY, lambda g: 1.0 if g.healthy else 0.0),
    (m.GPU_XID_ERRORS, lambda g: g.xid_errors),
    (m.GPU_MPS_DAEMON_RUNNING, lambda g: 1.0 if g.mps_daemon_running else 0.0),
    (m.GPU_MPS_DAEMON_RESTARTS, lambda g: g.mps_restarts),
)

TICKS, TICK_SECONDS, EVENT_FAILURES, AMBIGUOUS, ONLINE_WAKES, PAUSE_SECONDS = m.TICKS, m.TICK_SECONDS, m.EVENT_FAILURES, m.AMBIGUOUS, m.ONLINE_WAKES, m.PAUSE_SECONDS
METRICS: Final = m.METRICS

def _family(spec: MetricSpec) -> Any:
    cls = GaugeMetricFamily if spec.type == "gauge" else CounterMetricFamily
    return cls(spec.name, spec.help, labels=list(spec.labels))


class AgentCollector:
    def __init__(self, view: Callable[[], AgentView]) -> None:
        self._view = view

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families are built per scrape

    def collect(self) -> Iterator[Metric]:
        v = self._view()
        yield from _container_families(v)
        yield from _gpu_families(v)
        for spec, value in ((TICKS, v.ticks), (TICK_SECONDS, v.tick_seconds_total), (EVENT_FAILURES, v.event_failures), (AMBIGUOUS, v.ambiguous_processes)):
            family = _family(spec)
            family.add_metric([], value)
            yield family
        wakes = _family(ONLINE_WAKES)
        for outcome, count in v.online_wakes:
            wakes.add_metric([outcome], count)
        yield wakes
        pauses = HistogramMetricFamily(PAUSE_SECONDS.name, PAUSE_SECONDS.help)
        pauses.add_metric([], v.pause_latency.cumulative(), v.pause_latency.total_seconds)
        yield pauses


def _container_families(v: AgentView) -> Iterator[Metric]:
    for spec, value in CONTAINER_METRICS:
        family = _family(spec)
        frozen = "app_class" in spec.labels
        for row in v.containers:
            labels = [row.namespace, row.pod, row.container, row.gpu_uuid]
            if frozen:
                labels.append(row.app_class)
            family.add_metric(labels, value(row))
        yield family


def _gpu_families(v: AgentView) -> Iterator[Metric]:
    for spec, value in GPU_METRICS:
        family = _family(spec)
        for g in v.gpus:
            family.add_metric([g.uuid, str(g.index), g.model], value(g))
        yield family


def serve_metrics(view: Callable[[], AgentView], host: str, port: int) -> tuple[HardenedHTTPServer, threading.Thread, int]:
    """Serve GET /metrics on host:port (port 0 picks a free one); returns (server, thread, port).
    Other paths get 404 and other methods 405, in the JSON shape of `tessera.httpd`; stop with
    `server.stop()`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(view))
    return serve_registry(registry, host, port, "agent-metrics")
