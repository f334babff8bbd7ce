"""The DRAPlugin gRPC service, in the two versions kubelet speaks: decode, call the plugin, encode.

`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` and `...dra.v1beta1.DRAPlugin` (staging/src/k8s.io/
kubelet/pkg/apis/dra/{v1,v1beta1}/api.proto) have the same messages under two package names, so
one adapter serves both, given the version's generated module. Per the protos, a failure of one
claim goes into that claim's `error` and the response still has an entry for every claim; a
request that cannot be answered per claim (a claim without a UID: the response is keyed by UID;
the same UID twice) is INVALID_ARGUMENT with a message naming the claim and the problem. An
unexpected exception in the plugin becomes that claim's error (logged with its traceback here),
never a traceback to kubelet.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import grpc

from tessera_node.dra.api.dra.v1 import api_pb2 as v1
from tessera_node.dra.api.dra.v1 import api_pb2_grpc as v1_grpc
from tessera_node.dra.api.dra.v1beta1 import api_pb2 as v1beta1
from tessera_node.dra.api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from tessera_node.dra.core import ClaimRef

log = logging.getLogger("tessera.dra")
DEFAULT_WORKERS = 4


@dataclass(frozen=True)
class DeviceOut:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True)
class PrepareOutcome:
    devices: tuple[DeviceOut, ...] = ()
    error: str = ""


@dataclass
class RpcCounters:
    prepared: int = 0
    prepare_errors: int = 0
    unprepared: int = 0
    unprepare_errors: int = 0
    calls: dict[str, int] = field(default_factory=dict)  # "<version>.<method>" -> calls


class ClaimHandler(Protocol):
    def prepare(self, claim: ClaimRef) -> PrepareOutcome: ...
    def unprepare(self, claim: ClaimRef) -> str: ...


def _claims(request: Any, context: grpc.ServicerContext) -> list[ClaimRef]:
    claims = [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]
    seen: set[str] = set()
    for i, claim in enumerate(claims):
        if not claim.uid:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"claims[{i}] ({claim.namespace or '?'}/{claim.name or '?'}): claim uid is empty; the response is keyed by uid")
        if claim.uid in seen:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"claims[{i}] ({claim.namespace}/{claim.name}): uid {claim.uid} appears twice in one request")
        seen.add(claim.uid)
    return claims


class DraServicer:
    """One version of the DRAPlugin service over `handler`; `api` is that version's api_pb2."""

    def __init__(self, api: ModuleType, version: str, handler: ClaimHandler, counters: RpcCounters) -> None:
        self._api = api
        self._version = version
        self._handler = handler
        self.counters = counters

    def _count(self, method: str) -> None:
        key = f"{self._version}.{method}"
        self.counters.calls[key] = self.counters.calls.get(key, 0) + 1

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("NodePrepareResources")
        response = self._api.NodePrepareResourcesResponse()
        for claim in _claims(request, context):
            try:
                outcome = self._handler.prepare(claim)
            except Exception as exc:  # noqa: BLE001 - a bug must reach kubelet as this claim's error
                log.exception("preparing claim %s failed", claim)
                outcome = PrepareOutcome(error=f"claim {claim}: internal error: {type(exc).__name__}: {exc}")
            entry = response.claims[claim.uid]
            if outcome.error:
                self.counters.prepare_errors += 1
                entry.error = outcome.error
                continue
            self.counters.prepared += 1
            for device in outcome.devices:
                entry.devices.add(
                    request_names=list(device.request_names), pool_name=device.pool, device_name=device.device, cdi_device_ids=list(device.cdi_device_ids)
                )
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("NodeUnprepareResources")
        response = self._api.NodeUnprepareResourcesResponse()
        for claim in _claims(request, context):
            try:
                error = self._handler.unprepare(claim)
            except Exception as exc:  # noqa: BLE001
                log.exception("unpreparing claim %s failed", claim)
                error = f"claim {claim}: internal error: {type(exc).__name__}: {exc}"
            if error:
                self.counters.unprepare_errors += 1
            else:
                self.counters.unprepared += 1
            response.claims[claim.uid].error = error
        return response


class _V1(DraServicer, v1_grpc.DRAPluginServicer):
    """`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`, which kubelet 1.34 and later call first."""


class _V1beta1(DraServicer, v1beta1_grpc.DRAPluginServicer):
    """`k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`, for kubelets that do not speak v1."""


def add_dra_services(server: grpc.Server, handler: ClaimHandler, counters: RpcCounters) -> None:
    """Both versions of DRAPlugin on `server`."""
    v1_grpc.add_DRAPluginServicer_to_server(_V1(v1, "v1", handler, counters), server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(_V1beta1(v1beta1, "v1beta1", handler, counters), server)


class UnixServer:
    """A gRPC server on one unix socket, re-created on start (a stale socket file is removed)."""

    def __init__(self, path: Path, add: Callable[[grpc.Server], None], *, workers: int = DEFAULT_WORKERS) -> None:
        self.path = path
        self._add = add
        self._workers = workers
        self._server: grpc.Server | None = None

    def start(self) -> None:
        self.stop()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # no stale socket to remove
            os.unlink(self.path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix=f"dra-{self.path.name}"))
        self._add(server)
        if server.add_insecure_port(f"unix://{self.path}") == 0:
            raise OSError(f"cannot listen on {self.path}")
        server.start()
        self._server = server

    def stop(self, grace_s: float = 0.5) -> None:
        if self._server is not None:
            self._server.stop(grace_s).wait()
            self._server = None
        with contextlib.suppress(FileNotFoundError):  # no stale socket to remove
            os.unlink(self.path)

    @property
    def serving(self) -> bool:
        return self._server is not None and self.path.exists()


def request_names(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n for n in names if n))
