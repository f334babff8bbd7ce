"""A node with the real DRA plugin on its unix sockets, driven by the kubelet emulator of one
release, over an in-memory API server and simulated GPUs (short temp dir: unix socket paths max
107 bytes)."""
from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tessera.kube.fake import FakeKubeApi
from tessera.model.contract import LABEL_MEMORY_ENFORCEMENT, LABEL_POOL, LABEL_POOL_KIND, LABEL_SHARING_POLICY
from tessera_node.dra.cdi import CdiSettings
from tessera_node.dra.plugin import DraPlugin, DraPluginSettings, Ready
from tessera_node.gpu.simulated import SimulatedBackend
from tessera_node.registry import ContainerRegistry
from tessera_node.testing.dra_claims import Grant, allocated_claim, pod_using_claim
from tessera_node.testing.kubelet_dra import KUBELET_1_36, ClaimResult, KubeletDra, KubeletDraVersion, cdi_devices_for, resolve_cdi, CdiResolution

NODE = "gpu-node-1"
POOL = "pool-a"


@dataclass
class DraNode:
    spec: str = "T4:2"
    sharing: str = "fixed-share"
    version: KubeletDraVersion = KUBELET_1_36
    pool_kind: str = "shared"
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="dra", dir="/tmp")))

    def __post_init__(self) -> None:
        self.kube = FakeKubeApi(dra_consumable_capacity=self.version.consumable_capacity)
        labels = {LABEL_POOL_KIND: self.pool_kind, LABEL_POOL: POOL, LABEL_SHARING_POLICY: self.sharing, LABEL_MEMORY_ENFORCEMENT: "enforce"}
        self.kube.create_node({"metadata": {"name": NODE, "labels": labels}})
        self.backend = SimulatedBackend.from_spec(self.spec, node_seed=NODE)
        self.settings = DraPluginSettings(
            node_name=NODE, registry_dir=self.root / "reg", plugins_dir=self.root / "plugins", state_dir=self.root / "state",
            cdi=CdiSettings(cdi_dir=self.root / "cdi"), socket_check_s=0.05,
        )
        self.registry = ContainerRegistry(self.settings.state_dir)
        self.kubelet = KubeletDra(self.version, self.settings.registry_dir)
        self.ready: list[Ready] = []
        self.plugin: DraPlugin | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_plugin(self) -> DraPlugin:
        plugin = DraPlugin(self.settings, self.backend, self.kube, self.registry, on_ready=self.ready.append)
        self._stop = threading.Event()
        started = threading.Event()
        self.plugin = plugin
        original = plugin.start

        def start() -> None:
            original()
            started.set()

        plugin.start = start  # type: ignore[method-assign]
        self._thread = threading.Thread(target=plugin.run, args=(self._stop,), daemon=True)
        self._thread.start()
        assert started.wait(10), "the plugin did not start"
        return plugin

    def stop_plugin(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.plugin = None

    def start_kubelet(self) -> KubeletDra:
        self.kubelet.start()
        self.kubelet.wait_registered()
        return self.kubelet

    def claim(self, name: str, grants: list[Grant], *, pod: str | None = None, containers: tuple[str, ...] = ("main",), app_class: str | None = None) -> tuple[str, str, str]:
        """A claim allocated as kube-scheduler would (and its pod), stored in the API server."""
        reserved: list[tuple[str, str]] = []
        if pod is not None:
            created = self.kube.create_pod(pod_using_claim("default", pod, name, NODE, containers=containers, app_class=app_class))
            reserved.append((pod, created["metadata"]["uid"]))
        body = self.kube.put_resource_claim(allocated_claim("default", name, grants, pods=reserved, consumable_capacity=self.version.consumable_capacity))
        return ("default", name, body["metadata"]["uid"])

    def prepare(self, *claims: tuple[str, str, str]) -> dict[str, ClaimResult]:
        return self.kubelet.prepare(list(claims))

    def container(self, results: dict[str, ClaimResult], uid: str) -> CdiResolution:
        return resolve_cdi(self.settings.cdi.cdi_dir, cdi_devices_for(results, uid))

    def cdi_files(self) -> list[str]:
        return sorted(p.name for p in self.settings.cdi.cdi_dir.glob("*.json")) if self.settings.cdi.cdi_dir.is_dir() else []

    def slices(self) -> list[dict[str, Any]]:
        return self.kube.list_resource_slices(node_name=NODE)

    def close(self) -> None:
        self.kubelet.stop()
        self.stop_plugin()
        shutil.rmtree(self.root, ignore_errors=True)


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll for what the plugin does in its own thread (republishing its slice)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


__all__ = ["NODE", "POOL", "DraNode", "Grant", "wait_until"]
