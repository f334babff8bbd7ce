"""kubelet's PodResources v1 server as the release in `KubeletVersion` serves it: the `Get` gate,
its status codes and messages, and the rate limit (sources in `kubelet_versions.py`)."""
from __future__ import annotations

import time
from collections.abc import Callable

import grpc

from tessera_node.deviceplugin.api.podresources.v1 import api_pb2 as pr
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2_grpc as pr_grpc
from tessera_node.testing.kubelet_versions import (
    GET_DISABLED,
    GET_UNIMPLEMENTED,
    RATE_LIMITED,
    KubeletVersion,
    TokenBucket,
    pod_not_found,
)

PodKey = tuple[str, str]  # namespace, name
# (the List answer, each known pod's entry): the device manager's state, encoded once per change
Snapshot = Callable[[], tuple[pr.ListPodResourcesResponse, dict[PodKey, pr.PodResources]]]


class PodResourcesServer(pr_grpc.PodResourcesListerServicer):
    """`List`, `Get`, `GetAllocatableResources` from the emulator's device assignments.

    Counts and times its calls (`calls`, `handler_seconds`) so benchmarks can tell the emulator's
    share of a PreStartContainer that calls back into it, and tests can see which calls a client
    made.
    """

    def __init__(self, version: KubeletVersion, snapshot: Snapshot, allocatable: Callable[[], list[pr.ContainerDevices]]) -> None:
        self.version = version
        self._snapshot = snapshot
        self._allocatable = allocatable
        self.limiter = TokenBucket(version.qps, version.burst)
        self.calls: dict[str, int] = {"List": 0, "Get": 0, "GetAllocatableResources": 0}
        self.handler_seconds: dict[str, list[float]] = {"List": [], "Get": []}

    def _admit(self, method: str, context: grpc.ServicerContext) -> None:
        # kubelet's unary interceptor runs before the handler: a rejected call does no work.
        if not self.limiter.allow():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED)
        self.calls[method] += 1

    def List(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:
        self._admit("List", context)
        began = time.perf_counter()
        response = self._snapshot()[0]
        self.handler_seconds["List"].append(time.perf_counter() - began)
        return response

    def Get(self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext) -> pr.GetPodResourcesResponse:
        if not self.version.has_get:
            # The method is not in this release's service: grpc-go answers before any interceptor.
            context.abort(grpc.StatusCode.UNIMPLEMENTED, GET_UNIMPLEMENTED)
        self._admit("Get", context)
        if not self.version.get_enabled:
            context.abort(grpc.StatusCode.UNKNOWN, GET_DISABLED)
        began = time.perf_counter()
        pod = self._snapshot()[1].get((request.pod_namespace, request.pod_name))
        self.handler_seconds["Get"].append(time.perf_counter() - began)
        if pod is None:
            context.abort(grpc.StatusCode.UNKNOWN, pod_not_found(request.pod_namespace, request.pod_name))
        return pr.GetPodResourcesResponse(pod_resources=pod)

    def GetAllocatableResources(self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext) -> pr.AllocatableResourcesResponse:
        self._admit("GetAllocatableResources", context)
        return pr.AllocatableResourcesResponse(devices=self._allocatable())
