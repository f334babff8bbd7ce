"""Prometheus metrics of the device plugin: registration with kubelet, GPU health, container starts.

The supervisor owns the figures (`PluginCounters`); a collector turns a snapshot of them into
metric families at scrape time, on a registry of its own, served on `--metrics-port` by
`tessera.httpd` (404/405 in JSON for anything but GET /metrics). `METRICS` declares the families (docs/monitoring.md and the
tests compare against it). Series carry no node label: Prometheus adds it from the target
(the ServiceMonitor relabels `node` from the pod's node name).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tessera.httpd import HardenedHTTPServer
from tessera.httpd.prometheus import serve_metrics as serve_registry
from tessera.model.metrics.spec import MetricSpec
from tessera.model.metrics.device_plugin import (  # noqa: F401 - the families this module serves
    REGISTERED,
    REGISTRATIONS,
    PAUSED,
    GPUS,
    CONTAINER_STARTS,
    METRICS,
)


@dataclass(frozen=True)
class PluginMetricsView:
    """What one scrape reports."""

    resource: str
    registered: bool = False
    paused: bool = False
    registrations_ok: int = 0
    registrations_failed: int = 0
    healthy_gpus: int = 0
    unhealthy_gpus: int = 0
    starts_accepted: int = 0
    starts_rejected: int = 0


@dataclass
class PluginCounters:
    """Counters bumped from gRPC threads and the supervisor; one lock, no lost increments."""

    registrations_ok: int = 0
    registrations_failed: int = 0
    starts_accepted: int = 0
    starts_rejected: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def snapshot(self) -> tuple[int, int, int, int]:
        with self._lock:
            return self.registrations_ok, self.registrations_failed, self.starts_accepted, self.starts_rejected


def _gauge(spec: MetricSpec) -> GaugeMetricFamily:
    return GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))


def _counter(spec: MetricSpec) -> CounterMetricFamily:
    return CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))


class PluginCollector:
    def __init__(self, view: Callable[[], PluginMetricsView]) -> None:
        self._view = view

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families are built per scrape

    def collect(self) -> Iterator[Metric]:
        v = self._view()
        registered = _gauge(REGISTERED)
        registered.add_metric([v.resource], 1.0 if v.registered else 0.0)
        registrations = _counter(REGISTRATIONS)
        registrations.add_metric([v.resource, "ok"], v.registrations_ok)
        registrations.add_metric([v.resource, "error"], v.registrations_failed)
        paused = _gauge(PAUSED)
        paused.add_metric([], 1.0 if v.paused else 0.0)
        gpus = _gauge(GPUS)
        gpus.add_metric(["healthy"], v.healthy_gpus)
        gpus.add_metric(["unhealthy"], v.unhealthy_gpus)
        starts = _counter(CONTAINER_STARTS)
        starts.add_metric(["accepted"], v.starts_accepted)
        starts.add_metric(["rejected"], v.starts_rejected)
        yield from (registered, registrations, paused, gpus, starts)


def serve_metrics(view: Callable[[], PluginMetricsView], host: str, port: int) -> tuple[HardenedHTTPServer, threading.Thread, int]:
    """Serve /metrics on host:port (port 0 picks a free one); returns (server, thread, port)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PluginCollector(view))
    return serve_registry(registry, host, port, "device-plugin-metrics")
