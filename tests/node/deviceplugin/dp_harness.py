"""A whole node side in one process: fake API server, simulated GPUs, kubelet emulator and the
real device plugin serving on unix sockets in a short temp dir (unix socket paths max 107 bytes)."""
from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tessera.model.contract import GPU_CORE, LABEL_POOL, LABEL_POOL_KIND, LABEL_SHARING_POLICY
from tessera.kube.fake import FakeKubeApi
from tessera_node.registry import ContainerRegistry
from tessera_node.deviceplugin.eviction import EvictionSettings
from tessera_node.gpu.health import HealthSettings
from tessera_node.deviceplugin.plugin import DevicePlugin, DevicePluginSettings
from tessera_node.gpu.simulated import SimulatedBackend
from extender_stand_in import ExtenderStandIn
from tessera_node.testing.kubelet_emulator import ContainerView, KubeletEmulator
from tessera_node.testing.kubelet_versions import KUBELET_1_30, KubeletVersion

NODE = "gpu-node-1"
POOL = "pool-a"
FAST = DevicePluginSettings(
    node_name=NODE,
    tick_s=0.02,
    node_poll_s=0.05,
    reconcile_s=0.5,
    health=HealthSettings(recovery_quiet_s=0.3, responsiveness_check_s=0.05),
    eviction=EvictionSettings(retry_initial_s=0.05, retry_max_s=0.2),
)


@dataclass
class Harness:
    spec: str = "H100-80GB:4"
    sharing: str = "fixed-share"
    pools: dict[str, Any] | None = None  # the pools file's document; None = no pools file
    evict: bool = True
    version: KubeletVersion = KUBELET_1_30  # the release our stacks pin
    prefetch: bool = True  # the plugin's background List after each Allocate
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="dp", dir="/tmp")))

    def __post_init__(self) -> None:
        self.kube = FakeKubeApi()
        labels = {LABEL_POOL_KIND: "shared", LABEL_POOL: POOL, LABEL_SHARING_POLICY: self.sharing}
        self.kube.create_node({"metadata": {"name": NODE, "labels": labels}})
        self.backend = SimulatedBackend.from_spec(self.spec, node_seed=NODE)
        self.settings = replace(
            FAST, device_plugin_dir=self.root / "dp", pod_resources_socket=self.root / "pr" / "kubelet.sock", state_dir=self.root / "state",
            eviction=replace(FAST.eviction, enabled=self.evict), pod_resources_prefetch=self.prefetch,
        )
        if self.pools is not None:
            self.settings = replace(self.settings, pools_file=self.root / "pools.json")
            self.write_pools(self.pools)
        self.registry = ContainerRegistry(self.settings.state_dir)
        self.kubelet = KubeletEmulator(self.settings.device_plugin_dir, self.settings.pod_resources_socket, self.kube, version=self.version).start()
        self.plugin: DevicePlugin | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._extender: ExtenderStandIn | None = None

    def start_plugin(self) -> DevicePlugin:
        self._stop = threading.Event()
        registered = len(self.kubelet.registrations)
        self.plugin = DevicePlugin(self.settings, self.backend, self.kube, ContainerRegistry(self.settings.state_dir))
        self._thread = threading.Thread(target=self.plugin.run, args=(self._stop,), daemon=True)
        self._thread.start()
        assert self.kubelet.wait_for(
            lambda: len(self.kubelet.registrations) > registered and self.kubelet.connected(GPU_CORE) and len(self.kubelet.devices(GPU_CORE)) > 0
        ), "plugin did not register"
        return self.plugin

    def stop_plugin(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)
            assert not self._thread.is_alive(), "plugin did not stop"

    def write_pools(self, pools: dict[str, Any]) -> None:
        """What kubelet does when the tessera-pools ConfigMap changes: a new file content."""
        assert self.settings.pools_file is not None
        self.settings.pools_file.write_text(json.dumps(pools))

    @property
    def extender(self) -> ExtenderStandIn:
        if self._extender is None:
            self._extender = ExtenderStandIn(self.kube, NODE)
        return self._extender

    def allocate(self, pod: str, container: str = "main", namespace: str = "default") -> None:
        self.kubelet.allocate(namespace, pod, container, GPU_CORE)

    def start(self, pod: str, container: str = "main", namespace: str = "default") -> ContainerView:
        return self.kubelet.start_container(namespace, pod, container, GPU_CORE)

    def close(self) -> None:
        self.stop_plugin()
        self.kubelet.stop()
        self.kube.close()
        shutil.rmtree(self.root, ignore_errors=True)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 3.0) -> bool:
    """Poll for state that changes outside the emulator (registry files, node objects)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()
