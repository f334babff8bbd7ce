"""Test helpers: an in-memory API server, extenders serving it on loopback, a kube-scheduler emulator.

A uniquely named module (not `conftest`): test modules import from it, and `conftest` is ambiguous
when pytest collects this directory together with others that have their own conftest.py."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_scheduler_emulator import ExtenderClient, KubeSchedulerEmulator

from tessera.alloc import PlacementPolicy
from tessera.model.contract import ANNOTATION_NODE_GPUS, GPU_CORE, GPU_MEMORY, LABEL_GPU_PLACEMENT, LABEL_POOL_KIND, NodeGpu
from tessera.kube.api import KubeObject
from tessera.kube.fake import FakeKubeApi
from tessera.scheduler.http_server import ServerSettings
from tessera.scheduler.service import ExtenderConfig, ExtenderService
from tessera.scheduler.state import StateSettings
from tessera.scheduler.sync import SyncSettings

GIB = 1024


def node_manifest(
    name: str,
    gpus: int = 2,
    *,
    model: str = "T4",
    memory_mib: int = 16 * GIB,
    placement: str | None = None,
    labels: dict[str, str] | None = None,
) -> KubeObject:
    inventory = [NodeGpu(i, f"GPU-{name}-{i}", model, memory_mib).to_json() for i in range(gpus)]
    labels = {LABEL_POOL_KIND: "shared", **(labels or {})}
    if placement:
        labels[LABEL_GPU_PLACEMENT] = placement
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {ANNOTATION_NODE_GPUS: json.dumps(inventory)}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}},
    }


def pod_manifest(name: str, *containers: tuple[str, int, int | None], annotations: dict[str, str] | None = None) -> KubeObject:
    """containers: (name, gpu-core percent, gpu-memory MiB or None)."""
    specs = []
    for cname, core, memory in containers:
        resources: dict[str, str] = {GPU_CORE: str(core)} if core else {}
        if memory is not None:
            resources[GPU_MEMORY] = str(memory)
        specs.append({"name": cname, "resources": {"limits": resources}})
    return {
        "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
        "spec": {"schedulerName": "tessera-scheduler", "containers": specs},
    }


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@dataclass
class Harness:
    """One API server; extenders come and go over it (restart tests)."""

    api: FakeKubeApi
    policy: PlacementPolicy = PlacementPolicy.BINPACK
    max_body_bytes: int = 8 * 1024 * 1024
    clock: Callable[[], float] = time.time
    ttl_s: float = 300.0
    pools_file: Path | None = None
    services: list[ExtenderService] = field(default_factory=list)
    clients: list[ExtenderClient] = field(default_factory=list)

    def start(self) -> ExtenderService:
        config = ExtenderConfig(
            policy=self.policy,
            server=ServerSettings(host="127.0.0.1", port=0, max_body_bytes=self.max_body_bytes),
            state=StateSettings(assume_ttl_s=self.ttl_s),
            sync=SyncSettings(watch_timeout_s=0.5, retry_backoff_s=0.1, janitor_interval_s=3600),
            pools_file=self.pools_file,
        )
        service = ExtenderService(self.api, config, clock=self.clock)
        assert service.start(wait_ready_s=10), "extender cache did not sync"
        self.services.append(service)
        return service

    def client(self, service: ExtenderService) -> ExtenderClient:
        client = ExtenderClient("127.0.0.1", service.port)
        self.clients.append(client)
        return client

    def scheduler(self, service: ExtenderService, **kwargs: Any) -> KubeSchedulerEmulator:
        return KubeSchedulerEmulator(self.client(service), self.api, **kwargs)

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for service in self.services:
            service.stop()
