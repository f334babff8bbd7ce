"""Client of kubelet's PodResources API (v1, unix socket `pod-resources/kubelet.sock`).

Decodes `List` into `TokenHolder`s: which pod's container kubelet gave which
`tessera.dev/gpu-core` tokens. This is kubelet's own record, so it names the right pod even when
many pending pods ask for identical amounts.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from tessera.contract import GPU_CORE
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2 as pr
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2_grpc as pr_grpc

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
# A dense node's List answer can exceed gRPC's default 4 MiB receive limit (dcgm-exporter raises it
# to 16 MiB for the same reason).
_MAX_RECEIVE = 16 * 1024 * 1024


@dataclass(frozen=True)
class TokenHolder:
    namespace: str
    pod: str
    container: str
    tokens: frozenset[str]


class PodResourcesError(Exception):
    """kubelet's PodResources API could not be reached."""


def holders_from_response(response: pr.ListPodResourcesResponse, resource: str = GPU_CORE) -> list[TokenHolder]:
    out = []
    for pod in response.pod_resources:
        for container in pod.containers:
            tokens = frozenset(t for d in container.devices if d.resource_name == resource for t in d.device_ids)
            if tokens:
                out.append(TokenHolder(pod.namespace, pod.name, container.name, tokens))
    return out


class PodResourcesClient:
    """One channel per client; `list_holders` is safe to call from many threads."""

    def __init__(self, socket_path: Path, *, timeout_s: float = 2.0) -> None:
        self._socket = socket_path
        self._timeout = timeout_s
        self._channel = grpc.insecure_channel(f"unix://{socket_path}", options=[("grpc.max_receive_message_length", _MAX_RECEIVE)])
        self._stub = pr_grpc.PodResourcesListerStub(self._channel)

    def list_holders(self, resource: str = GPU_CORE) -> list[TokenHolder]:
        try:
            response = self._stub.List(pr.ListPodResourcesRequest(), timeout=self._timeout)
        except grpc.RpcError as exc:
            raise PodResourcesError(
                f"cannot list pod resources on {self._socket} ({exc.code().name}); mount "
                "/var/lib/kubelet/pod-resources into the device plugin container"
            ) from exc
        return holders_from_response(response, resource)

    def close(self) -> None:
        self._channel.close()
