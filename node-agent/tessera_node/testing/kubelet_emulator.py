"""A kubelet, as far as device plugins can tell: real gRPC over unix sockets.

- serves `Registration` on `<dir>/kubelet.sock`; on Register it dials the plugin's socket, reads
  its options and consumes ListAndWatch in a thread (keeping the latest devices and each
  message's encoded size);
- serves `PodResourcesLister` (v1) on its own socket from its device assignments; like kubelet's
  device manager, an assignment shows there once Allocate has returned (kubelet records it after
  the call), and `Get` is a lookup, not a scan;
- admits pods like kubelet's device manager: for each container asking for the resource, it takes
  free healthy devices (honouring GetPreferredAllocation when the plugin offers it), calls
  Allocate, records the assignment; then starts containers with PreStartContainer;
- resolves what a started container finally sees: Allocate's envs and mounts plus the container
  spec's env (literal values and configMapKeyRef from the API server), spec env applied last, as
  kubelet does;
- `restart()` behaves like a kubelet restart: kubelet.sock re-created, every other socket in the
  directory deleted, device assignments kept (kubelet's checkpoint).

Tests drive Allocate and PreStartContainer separately so they can call them in any order.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tessera.kube.api import KubeApi
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2 as pr
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2_grpc as pr_grpc

PodKey = tuple[str, str]  # namespace, name


@dataclass(frozen=True)
class ContainerView:
    """What a container finally sees, once started."""

    env: dict[str, str]
    mounts: tuple[tuple[str, str, bool], ...]  # (container path, host path, read only)
    devices: frozenset[str]
    env_conflicts: tuple[str, ...]  # keys both Allocate and the spec set (must be empty)


class StartFailed(Exception):
    """PreStartContainer (or Allocate) failed; kubelet would not start the container."""


@dataclass
class _Plugin:
    resource: str
    endpoint: str
    channel: grpc.Channel
    stub: dp_grpc.DevicePluginStub
    options: dp.DevicePluginOptions
    devices: dict[str, str] = field(default_factory=dict)  # id -> health
    message_sizes: list[int] = field(default_factory=list)
    stream_open: bool = True


@dataclass
class _Assigned:
    devices: frozenset[str]
    response: dp.ContainerAllocateResponse | None = None


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, emulator: KubeletEmulator) -> None:
        self._emulator = emulator

    def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported device plugin API version {request.version}")
        self._emulator._on_register(request)
        return dp.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, emulator: KubeletEmulator) -> None:
        self._emulator = emulator

    def List(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:
        began = time.perf_counter()
        response = self._emulator._list_response()[0]
        self._emulator.handler_seconds["List"].append(time.perf_counter() - began)
        return response

    def Get(self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext) -> pr.GetPodResourcesResponse:
        began = time.perf_counter()
        pod = self._emulator._list_response()[1].get((request.pod_namespace, request.pod_name))
        self._emulator.handler_seconds["Get"].append(time.perf_counter() - began)
        if pod is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_name} in namespace {request.pod_namespace} not found")
        return pr.GetPodResourcesResponse(pod_resources=pod)


class KubeletEmulator:
    def __init__(self, device_plugin_dir: Path, pod_resources_socket: Path, kube: KubeApi) -> None:
        self.dir = device_plugin_dir
        self.pod_resources_socket = pod_resources_socket
        self._kube = kube
        self._cond = threading.Condition()
        self._plugins: dict[str, _Plugin] = {}
        self._assigned: dict[PodKey, dict[str, _Assigned]] = {}
        self._views: dict[tuple[str, str, str], ContainerView] = {}
        self.registrations: list[tuple[float, str]] = []  # (monotonic time, resource)
        self.rpc_seconds: dict[str, list[float]] = {"Allocate": [], "PreStartContainer": []}  # client-side latency
        # Time our PodResources handlers take, so a benchmark can tell the emulator's share of a
        # PreStartContainer (which calls back into it) from the plugin's.
        self.handler_seconds: dict[str, list[float]] = {"List": [], "Get": []}
        self._pod_messages: dict[PodKey, pr.PodResources] = {}  # PodResources entry per pod with assignments
        self._list_cache: tuple[pr.ListPodResourcesResponse, dict[PodKey, pr.PodResources]] | None = None  # rebuilt after assignments change
        self._reg_server: grpc.Server | None = None
        self._pr_server: grpc.Server | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> KubeletEmulator:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._reg_server = self._serve(self.dir / "kubelet.sock", lambda s: dp_grpc.add_RegistrationServicer_to_server(_Registration(self), s))
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        self._pr_server = self._serve(self.pod_resources_socket, lambda s: pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), s))
        return self

    @staticmethod
    def _serve(path: Path, add: Callable[[grpc.Server], None]) -> grpc.Server:
        if path.exists():
            os.unlink(path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        add(server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        return server

    def stop(self) -> None:
        for server in (self._reg_server, self._pr_server):
            if server is not None:
                server.stop(0).wait(2)
        with self._cond:
            for plugin in self._plugins.values():
                plugin.channel.close()
            self._plugins.clear()

    def restart(self) -> float:
        """Restart like kubelet: drop plugin connections, wipe sockets, serve a new kubelet.sock.
        Returns the monotonic time the new kubelet.sock appeared."""
        if self._reg_server is not None:
            self._reg_server.stop(0).wait(2)
        with self._cond:
            for plugin in self._plugins.values():
                plugin.channel.close()
            self._plugins.clear()
        for entry in self.dir.iterdir():
            if entry.is_socket():
                entry.unlink()
        self._reg_server = self._serve(self.dir / "kubelet.sock", lambda s: dp_grpc.add_RegistrationServicer_to_server(_Registration(self), s))
        return time.monotonic()

    # --- registration and ListAndWatch -----------------------------------------------------------
    def _on_register(self, request: dp.RegisterRequest) -> None:
        channel = grpc.insecure_channel(f"unix://{self.dir / request.endpoint}")
        stub = dp_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
        plugin = _Plugin(request.resource_name, request.endpoint, channel, stub, options)
        with self._cond:
            old = self._plugins.get(request.resource_name)
            if old is not None:
                old.channel.close()
            self._plugins[request.resource_name] = plugin
            self.registrations.append((time.monotonic(), request.resource_name))
            self._cond.notify_all()
        threading.Thread(target=self._consume, args=(plugin,), daemon=True, name=f"listandwatch-{request.resource_name}").start()

    def _consume(self, plugin: _Plugin) -> None:
        try:
            for message in plugin.stub.ListAndWatch(dp.Empty()):
                with self._cond:
                    plugin.devices = {d.ID: d.health for d in message.devices}
                    plugin.message_sizes.append(message.ByteSize())
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # plugin went away (stopped, paused, or our channel was closed on restart)
        with self._cond:
            plugin.stream_open = False
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout_s)

    def plugin(self, resource: str) -> _Plugin | None:
        with self._cond:
            return self._plugins.get(resource)

    def devices(self, resource: str) -> dict[str, str]:
        with self._cond:
            plugin = self._plugins.get(resource)
            return dict(plugin.devices) if plugin else {}

    def connected(self, resource: str) -> bool:
        with self._cond:
            plugin = self._plugins.get(resource)
            return plugin is not None and plugin.stream_open

    # --- admission ------------------------------------------------------------------------------
    def _in_use(self) -> set[str]:
        return {d for containers in self._assigned.values() for a in containers.values() for d in a.devices}

    def allocate(self, namespace: str, name: str, container: str, resource: str) -> None:
        """Device manager admission for one container: pick devices, call Allocate."""
        pod = self._kube.get_pod(namespace, name)
        amount = _request(pod, container, resource)
        plugin = self.plugin(resource)
        if plugin is None:
            raise StartFailed(f"no device plugin registered for {resource}")
        with self._cond:
            existing = self._assigned.get((namespace, name), {}).get(container)
            if existing is not None and existing.response is not None:
                return  # kubelet reuses an assignment it already made (e.g. after a restart)
            free = sorted(d for d, h in plugin.devices.items() if h == "Healthy" and d not in self._in_use())
            if len(free) < amount:
                raise StartFailed(f"UnexpectedAdmissionError: {amount} {resource} requested, {len(free)} available")
            chosen = free[:amount]
            if plugin.options.get_preferred_allocation_available:
                preferred = plugin.stub.GetPreferredAllocation(
                    dp.PreferredAllocationRequest(container_requests=[dp.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=amount)]),
                    timeout=5,
                ).container_responses[0].deviceIDs
                if len(set(preferred)) == amount and set(preferred) <= set(free):
                    chosen = list(preferred)
            assigned = _Assigned(frozenset(chosen))
            self._assigned.setdefault((namespace, name), {})[container] = assigned  # taken, not yet in PodResources
        try:
            began = time.perf_counter()
            response = plugin.stub.Allocate(dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=sorted(assigned.devices))]), timeout=5)
            self.rpc_seconds["Allocate"].append(time.perf_counter() - began)
        except grpc.RpcError as exc:
            with self._cond:
                self._assigned[(namespace, name)].pop(container, None)
                self._pod_changed((namespace, name))
            raise StartFailed(f"Allocate failed: {exc.details()}") from exc
        with self._cond:
            assigned.response = response.container_responses[0]
            self._pod_changed((namespace, name))  # kubelet records the assignment once Allocate returned

    def start_container(self, namespace: str, name: str, container: str, resource: str) -> ContainerView:
        """PreStartContainer, then resolve what the container sees."""
        plugin = self.plugin(resource)
        with self._cond:
            assigned = self._assigned.get((namespace, name), {}).get(container)
        if plugin is None or assigned is None or assigned.response is None:
            raise StartFailed(f"{namespace}/{name}/{container} was not allocated {resource}")
        if plugin.options.pre_start_required:
            try:
                began = time.perf_counter()
                plugin.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=sorted(assigned.devices)), timeout=5)
                self.rpc_seconds["PreStartContainer"].append(time.perf_counter() - began)
            except grpc.RpcError as exc:
                raise StartFailed(f"PreStartContainer failed: {exc.details()}") from exc
        view = self._resolve(self._kube.get_pod(namespace, name), container, assigned)
        with self._cond:
            self._views[(namespace, name, container)] = view
        return view

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._cond:
            self._assigned.pop((namespace, name), None)
            self._pod_changed((namespace, name))
            for key in [k for k in self._views if k[:2] == (namespace, name)]:
                del self._views[key]

    def view(self, namespace: str, name: str, container: str) -> ContainerView | None:
        with self._cond:
            return self._views.get((namespace, name, container))

    def _resolve(self, pod: Mapping[str, Any], container: str, assigned: _Assigned) -> ContainerView:
        response = assigned.response
        assert response is not None
        env = dict(response.envs)
        conflicts = []
        spec = next(c for c in pod["spec"]["containers"] if c["name"] == container)
        for var in spec.get("env") or []:
            if var["name"] in response.envs:
                conflicts.append(var["name"])
            if "value" in var:
                env[var["name"]] = var["value"]
                continue
            ref = (var.get("valueFrom") or {}).get("configMapKeyRef")
            if ref:
                data = self._kube.get_configmap(pod["metadata"]["namespace"], ref["name"]).get("data") or {}
                if ref["key"] in data:
                    env[var["name"]] = data[ref["key"]]
                elif not ref.get("optional"):
                    raise StartFailed(f"CreateContainerConfigError: key {ref['key']} not found in ConfigMap {ref['name']}")
        mounts = tuple((m.container_path, m.host_path, m.read_only) for m in response.mounts)
        return ContainerView(env, mounts, assigned.devices, tuple(conflicts))

    def _pod_changed(self, key: PodKey) -> None:
        """Re-encode one pod's PodResources entry (callers hold `_cond`): kubelet answers List
        from its in-memory state, so the emulator must not rebuild every pod per List either."""
        containers = {c: a for c, a in self._assigned.get(key, {}).items() if a.response is not None}
        if containers:
            self._pod_messages[key] = pr.PodResources(
                name=key[1],
                namespace=key[0],
                containers=[
                    pr.ContainerResources(name=c, devices=[pr.ContainerDevices(resource_name=self._resource_of(a), device_ids=sorted(a.devices))])
                    for c, a in sorted(containers.items())
                ],
            )
        else:
            self._pod_messages.pop(key, None)
        self._list_cache = None

    def _list_response(self) -> tuple[pr.ListPodResourcesResponse, dict[PodKey, pr.PodResources]]:
        with self._cond:
            if self._list_cache is None:
                pods = dict(self._pod_messages)
                self._list_cache = (pr.ListPodResourcesResponse(pod_resources=[pods[k] for k in sorted(pods)]), pods)
            return self._list_cache

    def _resource_of(self, assigned: _Assigned) -> str:
        # One resource per emulator in practice; PodResources needs the name back.
        return next(iter(self._plugins), "tessera.dev/gpu-core")


def _request(pod: Mapping[str, Any], container: str, resource: str) -> int:
    spec = next((c for c in pod["spec"]["containers"] if c["name"] == container), None)
    if spec is None:
        raise StartFailed(f"pod has no container {container!r}")
    limits = (spec.get("resources") or {}).get("limits") or {}
    return int(limits.get(resource, 0))
