"""Test helpers: an in-memory API server, extenders serving it on loopback, a kube-scheduler emulator.

A uniquely named module (not `conftest`): test modules import from it, and `conftest` is ambiguous
when pytest collects this directory together with others that have their own conftest.py."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kube_scheduler_emulator import ExtenderClient, ExtenderEntry, KubeSchedulerEmulator

from tessera.alloc import PlacementPolicy
from tessera.model.contract import ANNOTATION_NODE_GPUS, GPU_CORE, GPU_MEMORY, LABEL_GPU_PLACEMENT, LABEL_POOL_KIND, NodeGpu
from tessera.kube.api import KubeApi, KubeObject
from tessera.kube.fake import FakeKubeApi
from tessera.manifests.scheduler import scheduler_configuration
from tessera.manifests.scheduler_doc import default_settings
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
    sm_count: int | None = None,
) -> KubeObject:
    inventory = [NodeGpu(i, f"GPU-{name}-{i}", model, memory_mib, sm_count=sm_count).to_json() for i in range(gpus)]
    labels = {LABEL_POOL_KIND: "shared", **(labels or {})}
    if placement:
        labels[LABEL_GPU_PLACEMENT] = placement
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {ANNOTATION_NODE_GPUS: json.dumps(inventory)}},
        # what the device plugin (100 gpu-core devices per GPU) and its memory publisher advertise
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", GPU_CORE: str(100 * gpus), GPU_MEMORY: str(memory_mib * gpus)}},
    }


def rendered_scheduler_config() -> str:
    """The KubeSchedulerConfiguration the manifests render (the ConfigMap's config.yaml)."""
    return yaml.safe_dump(scheduler_configuration(default_settings()), sort_keys=True)


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
    # the API the extender talks to (default: `api` itself); e.g. a real client of a loopback server over `api`
    service_api: Callable[[], KubeApi] | None = None
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
        service = ExtenderService(self.service_api() if self.service_api is not None else self.api, config, clock=self.clock)
        assert service.start(wait_ready_s=10), "extender cache did not sync"
        self.services.append(service)
        return service

    def client(self, service: ExtenderService) -> ExtenderClient:
        client = ExtenderClient("127.0.0.1", service.port)
        self.clients.append(client)
        return client

    def scheduler(
        self, service: ExtenderService, *, config: str | None = None, node_cache_capable: bool | None = None, **kwargs: Any
    ) -> KubeSchedulerEmulator:
        """kube-scheduler configured by `config` (default: the rendered configuration);
        `node_cache_capable` overrides that one field (to drive the full-object forms)."""
        entry = ExtenderEntry.from_config(config or rendered_scheduler_config())
        if node_cache_capable is not None:
            entry = replace(entry, node_cache_capable=node_cache_capable)
        client = ExtenderClient("127.0.0.1", service.port, timeout_s=entry.http_timeout_s)
        self.clients.append(client)
        return KubeSchedulerEmulator(client, self.api, entry, **kwargs)

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for service in self.services:
            service.stop()
