"""Client of kubelet's PodResources API (v1, unix socket `pod-resources/kubelet.sock`).

Decodes `List` into `TokenHolder`s: which pod's container kubelet gave which
`tessera.dev/gpu-core` tokens. This is kubelet's own record, so it names the right pod even when
many pending pods ask for identical amounts.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
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


def _holder_in(pod: pr.PodResources, resource: str, wanted: frozenset[str]) -> TokenHolder | None:
    for container in pod.containers:
        tokens = frozenset(t for d in container.devices if d.resource_name == resource for t in d.device_ids)
        if tokens == wanted:
            return TokenHolder(pod.namespace, pod.name, container.name, tokens)
    return None


class PodResourcesClient:
    """One channel per client; safe to call from many threads.

    `holders_of` answers "who holds exactly these tokens" from kubelet. Listing every pod on a
    dense node for each container start is the expensive part of PreStartContainer, so the last
    List answer is kept as a hint: a hit is confirmed with `Get` for that one pod (kubelet's
    current truth, so a stale hint can never name the wrong pod), and a miss lists again.
    Kubelets without `Get` (before 1.34 unless the KubeletPodResourcesGet gate is on) always List.
    """

    def __init__(self, socket_path: Path, *, timeout_s: float = 2.0, resource: str = GPU_CORE) -> None:
        self._socket = socket_path
        self._timeout = timeout_s
        self._resource = resource
        self._channel = grpc.insecure_channel(f"unix://{socket_path}", options=[("grpc.max_receive_message_length", _MAX_RECEIVE)])
        self._stub = pr_grpc.PodResourcesListerStub(self._channel)
        self._lock = threading.Lock()
        self._hint: dict[str, TokenHolder] = {}  # token -> holder, from the last List
        self._get_supported = True

    def _error(self, exc: grpc.RpcError) -> PodResourcesError:
        return PodResourcesError(
            f"cannot read pod resources on {self._socket} ({exc.code().name}); mount "
            "/var/lib/kubelet/pod-resources into the device plugin container"
        )

    def list_holders(self) -> list[TokenHolder]:
        try:
            response = self._stub.List(pr.ListPodResourcesRequest(), timeout=self._timeout)
        except grpc.RpcError as exc:
            raise self._error(exc) from exc
        holders = holders_from_response(response, self._resource)
        with self._lock:
            self._hint = {t: h for h in holders for t in h.tokens}
        return holders

    def holders_of(self, tokens: Sequence[str]) -> list[TokenHolder]:
        """The containers holding exactly `tokens` according to kubelet (normally one)."""
        wanted = frozenset(tokens)
        with self._lock:
            hint = self._hint.get(next(iter(wanted))) if wanted else None
            use_get = self._get_supported
        if hint is not None and hint.tokens == wanted and use_get:
            try:
                answer = self._stub.Get(pr.GetPodResourcesRequest(pod_name=hint.pod, pod_namespace=hint.namespace), timeout=self._timeout)
                confirmed = _holder_in(answer.pod_resources, self._resource, wanted)
                if confirmed is not None and confirmed.container == hint.container:
                    return [confirmed]
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    with self._lock:
                        self._get_supported = False
                elif exc.code() != grpc.StatusCode.NOT_FOUND:
                    raise self._error(exc) from exc
        return [h for h in self.list_holders() if h.tokens == wanted]

    def close(self) -> None:
        self._channel.close()
