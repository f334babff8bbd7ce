"""A kubelet, as far as device plugins can tell: real gRPC over unix sockets, release by release.

The release (`version`, default 1.30, what our stacks pin; `KUBELET_1_34` for 1.34 and later)
decides what PodResources `Get` answers and the rate limit; every fact and message is taken from
kubelet's source, cited in `kubelet_versions.py`.

- serves `Registration` on `<dir>/kubelet.sock`, validating like kubelet (API version, extended
  resource name; errors as UNKNOWN with kubelet's messages); on Register it dials the plugin's
  socket, reads its options and consumes ListAndWatch in a thread with grpc-go's default 4 MiB
  receive limit (keeping the latest devices and each message's encoded size);
- serves `PodResourcesLister` (v1) on its own socket (`kubelet_podresources.py`): like kubelet's
  device manager, an assignment shows there once Allocate has returned (kubelet records it after
  the call), `List` answers every admitted pod with all its containers, `Get` one pod;
- admits pods like kubelet's device manager: for each container asking for the resource, it takes
  free healthy devices (honouring GetPreferredAllocation when the plugin offers it), calls
  Allocate, records the assignment and writes its checkpoint file; then starts containers with
  PreStartContainer;
- resolves what a started container finally sees: Allocate's envs and mounts plus the container
  spec's env (literal values and configMapKeyRef from the API server), spec env applied last, as
  kubelet does;
- `restart()` behaves like a kubelet restart: both servers go away and come back, the
  device-plugins directory is emptied but for directories and the checkpoint, and the device
  assignments are read back from the checkpoint file (nothing survives in memory).

Tests drive Allocate and PreStartContainer separately so they can call them in any order.
"""
from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
import zlib
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
from tessera_node.testing.kubelet_podresources import PodKey, PodResourcesServer
from tessera_node.testing.kubelet_versions import (
    CHECKPOINT_FILE,
    KUBELET_1_30,
    MAX_MESSAGE_BYTES,
    SUPPORTED_DEVICE_PLUGIN_VERSIONS,
    KubeletVersion,
    invalid_resource_name,
    unsupported_version,
)

# v1helper.IsExtendedResourceName: a domain-prefixed name outside kubernetes.io, and a valid
# qualified name once prefixed with "requests." (quota's spelling).
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def is_extended_resource_name(name: str) -> bool:
    if "/" not in name or name.startswith("requests.") or "kubernetes.io/" in name:
        return False
    return bool(_QUALIFIED.match("requests." + name)) and len(name.split("/", 1)[0]) <= 253 - len("requests.")


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
    resource: str
    devices: frozenset[str]
    response: dp.ContainerAllocateResponse | None = None


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, emulator: KubeletEmulator) -> None:
        self._emulator = emulator

    def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:
        if request.version not in SUPPORTED_DEVICE_PLUGIN_VERSIONS:
            context.abort(grpc.StatusCode.UNKNOWN, unsupported_version(request.version))
        if not is_extended_resource_name(request.resource_name):
            context.abort(grpc.StatusCode.UNKNOWN, invalid_resource_name(request.resource_name))
        try:
            self._emulator._on_register(request)
        except grpc.RpcError as exc:
            context.abort(grpc.StatusCode.UNKNOWN, f"failed to get device plugin options: {exc.details()}")
        except grpc.FutureTimeoutError:
            context.abort(grpc.StatusCode.UNKNOWN, "failed to dial device plugin: context deadline exceeded")
        return dp.Empty()


class KubeletEmulator:
    def __init__(self, device_plugin_dir: Path, pod_resources_socket: Path, kube: KubeApi, *, version: KubeletVersion = KUBELET_1_30) -> None:
        self.dir = device_plugin_dir
        self.pod_resources_socket = pod_resources_socket
        self.version = version
        self.dial_timeout_s = 10.0  # kubelet's wait for a registering plugin's socket (client.go `dial`)
        self._kube = kube
        self._cond = threading.Condition()
        self._plugins: dict[str, _Plugin] = {}
        self._assigned: dict[PodKey, dict[str, _Assigned]] = {}
        self._uids: dict[PodKey, str] = {}
        self._views: dict[tuple[str, str, str], ContainerView] = {}
        self.registrations: list[tuple[float, str]] = []  # (monotonic time, resource)
        self.rpc_seconds: dict[str, list[float]] = {"Allocate": [], "PreStartContainer": []}  # client-side latency
        self._pod_messages: dict[PodKey, pr.PodResources] = {}  # PodResources entry per admitted pod
        self._list_cache: tuple[pr.ListPodResourcesResponse, dict[PodKey, pr.PodResources]] | None = None  # rebuilt after assignments change
        self.pod_resources = PodResourcesServer(version, self._list_response, self._allocatable)
        self._reg_server: grpc.Server | None = None
        self._pr_server: grpc.Server | None = None

    @property
    def handler_seconds(self) -> dict[str, list[float]]:
        """Time the PodResources handlers took, per method (for benchmarks)."""
        return self.pod_resources.handler_seconds

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> KubeletEmulator:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._reg_server = self._serve(self.dir / "kubelet.sock", lambda s: dp_grpc.add_RegistrationServicer_to_server(_Registration(self), s))
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        self._pr_server = self._serve(self.pod_resources_socket, lambda s: pr_grpc.add_PodResourcesListerServicer_to_server(self.pod_resources, s))
        return self

    @staticmethod
    def _serve(path: Path, add: Callable[[grpc.Server], None]) -> grpc.Server:
        if path.exists() or path.is_symlink():
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

    def restart(self, *, down_s: float = 0.0) -> float:
        """Restart like kubelet: both servers stop and plugin connections drop; after `down_s`
        the new kubelet empties the device-plugins directory (all but directories and its
        checkpoint), reads its device assignments back from the checkpoint and serves again.
        Returns the monotonic time the new kubelet.sock appeared."""
        self.stop()
        with self._cond:
            self._assigned.clear()
            self._pod_messages.clear()
            self._list_cache = None
        time.sleep(down_s)
        for entry in self.dir.iterdir():
            if entry.name != CHECKPOINT_FILE and not (entry.is_dir() and not entry.is_symlink()):
                entry.unlink()
        self._read_checkpoint()
        self.pod_resources = PodResourcesServer(self.version, self._list_response, self._allocatable)
        self.start()
        return time.monotonic()

    # --- registration and ListAndWatch -----------------------------------------------------------
    def _on_register(self, request: dp.RegisterRequest) -> None:
        channel = grpc.insecure_channel(f"unix://{self.dir / request.endpoint}", options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
        try:
            grpc.channel_ready_future(channel).result(timeout=self.dial_timeout_s)
            stub = dp_grpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
        except BaseException:
            channel.close()
            raise
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
    def _in_use(self, resource: str) -> set[str]:
        return {d for containers in self._assigned.values() for a in containers.values() if a.resource == resource for d in a.devices}

    def assignments(self, resource: str) -> dict[tuple[str, str, str], frozenset[str]]:
        """Recorded device assignments (namespace, pod, container) -> devices, as kubelet holds them."""
        with self._cond:
            return {
                (ns, name, c): a.devices
                for (ns, name), containers in self._assigned.items()
                for c, a in containers.items()
                if a.resource == resource and a.response is not None
            }

    def allocate(self, namespace: str, name: str, container: str, resource: str) -> None:
        """Device manager admission for one container: pick devices, call Allocate."""
        pod = self._kube.get_pod(namespace, name)
        amount = _request(pod, container, resource)
        plugin = self.plugin(resource)
        if plugin is None:
            raise StartFailed(f"cannot allocate unregistered device {resource}")
        with self._cond:
            self._uids[(namespace, name)] = str(pod["metadata"].get("uid", ""))
            existing = self._assigned.get((namespace, name), {}).get(container)
            if existing is not None and existing.response is not None:
                return  # kubelet reuses an assignment it already made (e.g. after a restart)
            free = sorted(d for d, h in plugin.devices.items() if h == "Healthy" and d not in self._in_use(resource))
            if len(free) < amount:
                raise StartFailed(f"UnexpectedAdmissionError: requested number of devices unavailable for {resource}. Requested: {amount}, Available: {len(free)}")
            chosen = free[:amount]
            if plugin.options.get_preferred_allocation_available:
                preferred = plugin.stub.GetPreferredAllocation(
                    dp.PreferredAllocationRequest(container_requests=[dp.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=amount)]),
                    timeout=5,
                ).container_responses[0].deviceIDs
                if len(set(preferred)) == amount and set(preferred) <= set(free):
                    chosen = list(preferred)
            assigned = _Assigned(resource, frozenset(chosen))
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
            self._write_checkpoint()

    def start_container(self, namespace: str, name: str, container: str, resource: str) -> ContainerView:
        """PreStartContainer, then resolve what the container sees."""
        plugin = self.plugin(resource)
        with self._cond:
            assigned = self._assigned.get((namespace, name), {}).get(container)
        if plugin is None or assigned is None or assigned.response is None:
            raise StartFailed(f"no devices found allocated in local cache for pod {namespace}/{name}, container {container}, resource {resource}")
        if plugin.options.pre_start_required:
            try:
                began = time.perf_counter()
                plugin.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=sorted(assigned.devices)), timeout=30)
                self.rpc_seconds["PreStartContainer"].append(time.perf_counter() - began)
            except grpc.RpcError as exc:
                raise StartFailed(f"device plugin PreStartContainer rpc failed with err: rpc error: code = {exc.code().name} desc = {exc.details()}") from exc
        view = self._resolve(self._kube.get_pod(namespace, name), container, assigned)
        with self._cond:
            self._views[(namespace, name, container)] = view
        return view

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._cond:
            self._assigned.pop((namespace, name), None)
            self._uids.pop((namespace, name), None)
            self._pod_changed((namespace, name))
            for key in [k for k in self._views if k[:2] == (namespace, name)]:
                del self._views[key]
            self._write_checkpoint()

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

    # --- what PodResources serves ---------------------------------------------------------------
    def _pod_changed(self, key: PodKey) -> None:
        """Re-encode one pod's PodResources entry (callers hold `_cond`): kubelet answers List
        from its in-memory state, so the emulator must not rebuild every pod per List either.
        Every container of the pod is listed, with the devices recorded for it (none until its
        Allocate returned)."""
        recorded = {c: a for c, a in self._assigned.get(key, {}).items() if a.response is not None}
        if key in self._uids or recorded:
            names = self._container_names(key) or sorted(recorded)
            self._pod_messages[key] = pr.PodResources(
                name=key[1],
                namespace=key[0],
                containers=[
                    pr.ContainerResources(
                        name=c,
                        devices=[pr.ContainerDevices(resource_name=recorded[c].resource, device_ids=sorted(recorded[c].devices))] if c in recorded else [],
                    )
                    for c in names
                ],
            )
        else:
            self._pod_messages.pop(key, None)
        self._list_cache = None

    def _container_names(self, key: PodKey) -> list[str]:
        try:
            spec = self._kube.get_pod(*key).get("spec") or {}
        except Exception:  # the pod left the API server; kubelet still lists what it recorded
            return []
        restartable = [c["name"] for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        return restartable + [c["name"] for c in spec.get("containers") or []]

    def _list_response(self) -> tuple[pr.ListPodResourcesResponse, dict[PodKey, pr.PodResources]]:
        with self._cond:
            if self._list_cache is None:
                pods = dict(self._pod_messages)
                self._list_cache = (pr.ListPodResourcesResponse(pod_resources=[pods[k] for k in sorted(pods)]), pods)
            return self._list_cache

    def _allocatable(self) -> list[pr.ContainerDevices]:
        with self._cond:
            return [pr.ContainerDevices(resource_name=p.resource, device_ids=sorted(d for d, h in p.devices.items() if h == "Healthy")) for p in self._plugins.values()]

    # --- checkpoint -----------------------------------------------------------------------------
    def _write_checkpoint(self) -> None:
        """kubelet's checkpoint layout (`checkpoint/checkpoint.go`); the checksum is the
        emulator's own (kubelet's hashes Go's object dump), so only the emulator reads it back."""
        entries = [
            {
                "PodUID": self._uids.get(key, ""),
                "ContainerName": c,
                "ResourceName": a.resource,
                "DeviceIDs": {"-1": sorted(a.devices)},
                "AllocResp": base64.b64encode(a.response.SerializeToString()).decode(),
            }
            for key, containers in sorted(self._assigned.items())
            for c, a in sorted(containers.items())
            if a.response is not None
        ]
        registered = {r: sorted(p.devices) for r, p in self._plugins.items()}
        data = {"PodDeviceEntries": entries, "RegisteredDevices": registered}
        body = {"Data": data, "Checksum": zlib.crc32(json.dumps(data, sort_keys=True).encode())}
        tmp = self.dir / f".{CHECKPOINT_FILE}.tmp"
        tmp.write_text(json.dumps(body))
        os.replace(tmp, self.dir / CHECKPOINT_FILE)

    def _read_checkpoint(self) -> None:
        path = self.dir / CHECKPOINT_FILE
        if not path.exists():
            return
        body = json.loads(path.read_text())
        data = body["Data"]
        if zlib.crc32(json.dumps(data, sort_keys=True).encode()) != body["Checksum"]:
            raise StartFailed(f"checkpoint {path} is corrupt")
        by_uid = {str(p["metadata"].get("uid", "")): (p["metadata"]["namespace"], p["metadata"]["name"]) for p in self._kube.list_pods()}
        with self._cond:
            for entry in data["PodDeviceEntries"]:
                key = by_uid.get(entry["PodUID"])
                if key is None:
                    continue  # the pod is gone: kubelet frees its devices (UpdateAllocatedDevices)
                response = dp.ContainerAllocateResponse.FromString(base64.b64decode(entry["AllocResp"]))
                devices = frozenset(d for ids in entry["DeviceIDs"].values() for d in ids)
                self._uids[key] = entry["PodUID"]
                self._assigned.setdefault(key, {})[entry["ContainerName"]] = _Assigned(entry["ResourceName"], devices, response)
            for key in list(self._assigned):
                self._pod_changed(key)


def _request(pod: Mapping[str, Any], container: str, resource: str) -> int:
    spec = next((c for c in pod["spec"]["containers"] if c["name"] == container), None)
    if spec is None:
        raise StartFailed(f"pod has no container {container!r}")
    limits = (spec.get("resources") or {}).get("limits") or {}
    return int(limits.get(resource, 0))
