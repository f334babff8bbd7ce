"""The DevicePlugin gRPC service: decode, call the pure core, encode. Nothing else lives here."""
from __future__ import annotations

import os
import threading
import time
from collections import deque
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
# Handler threads. Each ListAndWatch stream holds one for its lifetime (one per kubelet
# connection, two briefly across a kubelet restart); kubelet's pod workers call PreStartContainer
# concurrently, each call blocking on kubelet's PodResources and the API server. Eight leaves six
# for those; more only adds threads that contend for the GIL without adding throughput.
DEFAULT_WORKERS = 8


class RpcTimings:
    """Handler time of the latency-critical RPCs (wall and the handler thread's CPU), for the last
    `keep` calls of each. What kubelet sees is transport + handler; keeping the handler's share
    tells which of the two a slow start came from (bench/device_plugin.py prints both)."""

    def __init__(self, keep: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._keep = keep
        self._calls: dict[str, deque[tuple[float, float]]] = {}

    def record(self, method: str, wall_s: float, cpu_s: float) -> None:
        with self._lock:
            self._calls.setdefault(method, deque(maxlen=self._keep)).append((wall_s, cpu_s))

    def snapshot(self) -> dict[str, list[tuple[float, float]]]:
        """(wall seconds, CPU seconds) per call, oldest first, per method."""
        with self._lock:
            return {method: list(calls) for method, calls in self._calls.items()}


class PluginState:
    """The advertised inventory, shared by the supervisor (writer) and gRPC threads (readers)."""

    def __init__(self, inventory: Inventory, allocate: AllocateSettings) -> None:
        self._cond = threading.Condition()
        inventory.advertises(())  # builds its token set here, not in the first Allocate after it
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
        inventory.advertises(())  # builds its token set here, not in the first Allocate after it
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
    def __init__(
        self,
        state: PluginState,
        prestart: PreStart,
        before_allocate: Callable[[Sequence[str]], None] = lambda tokens: None,
        after_allocate: Callable[[], None] = lambda: None,
        timings: RpcTimings | None = None,
    ) -> None:
        self._state = state
        self._prestart = prestart
        # Told every Allocate's device IDs before it is answered (PodResources lookups rely on
        # seeing every assignment), and brings allocate settings up to date (pool policy).
        self._before_allocate = before_allocate
        self._after_allocate = after_allocate  # an accepted Allocate is about to be answered
        self.timings = timings or RpcTimings()
        # The answer depends only on the settings (node-wide facts): built once per settings.
        self._answer_cache: tuple[AllocateSettings, dp.ContainerAllocateResponse] | None = None

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
        began, cpu = time.perf_counter(), time.thread_time()
        self._before_allocate([t for req in request.container_requests for t in req.devices_ids])
        inventory, settings = self._state.inventory, self._state.allocate_settings
        responses = []
        try:
            for req in request.container_requests:
                responses.append(self._answer(inventory, req.devices_ids, settings))
        except TokenError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            self.timings.record("Allocate", time.perf_counter() - began, time.thread_time() - cpu)
        self._after_allocate()
        return dp.AllocateResponse(container_responses=responses)

    def _answer(self, inventory: Inventory, tokens: Sequence[str], settings: AllocateSettings) -> dp.ContainerAllocateResponse:
        if not tokens or not inventory.advertises(tokens):
            allocate_container(inventory, list(tokens), settings)  # raises TokenError saying what is wrong
            raise TokenError(f"{sorted(tokens)[:3]} are not tessera.dev/gpu-core device IDs this plugin advertised")
        cached = self._answer_cache
        if cached is not None and cached[0] == settings:
            return cached[1]
        answer = allocate_container(inventory, list(tokens), settings)
        response = dp.ContainerAllocateResponse(
            envs=dict(answer.envs),
            mounts=[dp.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only) for m in answer.mounts],
        )
        self._answer_cache = (settings, response)
        return response

    def PreStartContainer(self, request: dp.PreStartContainerRequest, context: grpc.ServicerContext) -> dp.PreStartContainerResponse:
        began, cpu = time.perf_counter(), time.thread_time()
        try:
            self._prestart(list(request.devices_ids))
        except PreStartRejected as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        finally:
            self.timings.record("PreStartContainer", time.perf_counter() - began, time.thread_time() - cpu)
        return dp.PreStartContainerResponse()


class PluginServer:
    """The gRPC server on the plugin's unix socket. `start` (re)creates the socket file."""

    def __init__(self, socket_path: Path, servicer: DevicePluginServicer, *, workers: int = DEFAULT_WORKERS) -> None:
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
