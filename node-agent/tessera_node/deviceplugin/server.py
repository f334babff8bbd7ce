"""The DevicePlugin gRPC service: decode, call the pure core, encode. Nothing else lives here."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path

import grpc

from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from tessera_node.deviceplugin.core import (
    AllocateSettings,
    Inventory,
    TokenError,
    allocate_container,
    preferred_tokens,
)
from tessera_node.deviceplugin.prestart import PreStartRejected

PreStart = Callable[[Sequence[str]], None]
# ListAndWatch streams re-check whether the plugin is stopping at least this often.
_STREAM_WAKE_S = 0.5


class PluginState:
    """The advertised inventory, shared by the supervisor (writer) and gRPC threads (readers)."""

    def __init__(self, inventory: Inventory, allocate: AllocateSettings) -> None:
        self._cond = threading.Condition()
        self._inventory = inventory
        self._allocate = allocate
        self._version = 0
        self._closed = False

    @property
    def inventory(self) -> Inventory:
        with self._cond:
            return self._inventory

    @property
    def allocate_settings(self) -> AllocateSettings:
        with self._cond:
            return self._allocate

    def update(self, inventory: Inventory) -> None:
        with self._cond:
            if inventory != self._inventory:
                self._inventory = inventory
                self._version += 1
                self._cond.notify_all()

    def set_allocate_settings(self, settings: AllocateSettings) -> None:
        with self._cond:
            self._allocate = settings

    def wait_newer(self, version: int, timeout_s: float) -> tuple[int, Inventory] | None:
        """The inventory once its version passes `version`; None on timeout or when closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._version > version or self._closed, timeout_s)
            if self._closed or self._version <= version:
                return None
            return self._version, self._inventory

    def current(self) -> tuple[int, Inventory]:
        with self._cond:
            return self._version, self._inventory

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed


def list_and_watch_response(inventory: Inventory) -> dp.ListAndWatchResponse:
    return dp.ListAndWatchResponse(devices=[dp.Device(ID=token, health=health.value) for token, health in inventory.devices()])


class DevicePluginServicer(dp_grpc.DevicePluginServicer):
    def __init__(self, state: PluginState, prestart: PreStart, before_allocate: Callable[[], None] = lambda: None) -> None:
        self._state = state
        self._prestart = prestart
        self._before_allocate = before_allocate  # brings allocate settings up to date (pool policy)

    def GetDevicePluginOptions(self, request: dp.Empty, context: grpc.ServicerContext) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: dp.Empty, context: grpc.ServicerContext) -> Iterator[dp.ListAndWatchResponse]:
        version, inventory = self._state.current()
        yield list_and_watch_response(inventory)
        while context.is_active() and not self._state.closed:
            newer = self._state.wait_newer(version, _STREAM_WAKE_S)
            if newer is not None:
                version, inventory = newer
                yield list_and_watch_response(inventory)

    def GetPreferredAllocation(self, request: dp.PreferredAllocationRequest, context: grpc.ServicerContext) -> dp.PreferredAllocationResponse:
        responses = []
        try:
            for req in request.container_requests:
                chosen = preferred_tokens(list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size)
                responses.append(dp.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        except TokenError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return dp.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: dp.AllocateRequest, context: grpc.ServicerContext) -> dp.AllocateResponse:
        self._before_allocate()
        inventory, settings = self._state.inventory, self._state.allocate_settings
        responses = []
        try:
            for req in request.container_requests:
                answer = allocate_container(inventory, list(req.devices_ids), settings)
                responses.append(
                    dp.ContainerAllocateResponse(
                        envs=dict(answer.envs),
                        mounts=[dp.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only) for m in answer.mounts],
                    )
                )
        except TokenError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return dp.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request: dp.PreStartContainerRequest, context: grpc.ServicerContext) -> dp.PreStartContainerResponse:
        try:
            self._prestart(list(request.devices_ids))
        except PreStartRejected as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return dp.PreStartContainerResponse()


class PluginServer:
    """The gRPC server on the plugin's unix socket. `start` (re)creates the socket file."""

    def __init__(self, socket_path: Path, servicer: DevicePluginServicer, *, workers: int = 8) -> None:
        self.socket_path = socket_path
        self._servicer = servicer
        self._workers = workers
        self._server: grpc.Server | None = None

    def start(self) -> None:
        self.stop()
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        if self.socket_path.exists() or self.socket_path.is_symlink():
            os.unlink(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="device-plugin"))
        dp_grpc.add_DevicePluginServicer_to_server(self._servicer, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server

    def stop(self, grace_s: float = 0.05) -> None:
        if self._server is not None:
            self._server.stop(grace_s).wait(grace_s + 1.0)
            self._server = None
            try:
                os.unlink(self.socket_path)
            except FileNotFoundError:
                pass

    @property
    def running(self) -> bool:
        return self._server is not None
