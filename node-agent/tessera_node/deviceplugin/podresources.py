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

from tessera.model.contract import GPU_CORE
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


def _tokens(container: pr.ContainerResources, resource: str) -> frozenset[str]:
    tokens: frozenset[str] = frozenset()
    for devices in container.devices:
        if devices.resource_name == resource:
            ids = frozenset(devices.device_ids[:])  # a slice is copied in C; iterating the field is not
            tokens = tokens | ids if tokens else ids
    return tokens


def holders_from_response(response: pr.ListPodResourcesResponse, resource: str = GPU_CORE) -> list[TokenHolder]:
    # Called on every List (a dense node's every pod), so pods and containers without devices cost
    # one attribute read each.
    out = []
    for pod in response.pod_resources:
        for container in pod.containers:
            if container.devices:
                tokens = _tokens(container, resource)
                if tokens:
                    out.append(TokenHolder(pod.namespace, pod.name, container.name, tokens))
    return out


def _holder_in(pod: pr.PodResources, resource: str, wanted: frozenset[str]) -> TokenHolder | None:
    for container in pod.containers:
        tokens = _tokens(container, resource)
        if tokens == wanted:
            return TokenHolder(pod.namespace, pod.name, container.name, tokens)
    return None


class PodResourcesClient:
    """One channel for the client's lifetime (gRPC reconnects it after kubelet restarts); safe to
    call from many threads.

    `holders_of` answers "who holds exactly these tokens" from kubelet. Listing every pod on a
    dense node for each container start is the expensive part of PreStartContainer, so the last
    List answer is kept as a hint: a hit is confirmed with `Get` for that one pod (kubelet's
    current truth, so a stale hint can never name the wrong pod), and a miss lists again.
    Kubelets without `Get` (before 1.34 unless the KubeletPodResourcesGet gate is on) always List.

    Concurrent misses (kubelet's pod workers start containers in parallel) share one List that
    began after they arrived, instead of one List each: on a dense node each List decodes every
    pod while holding the GIL the other handlers need.

    Not done, on purpose (measured with bench/device_plugin.py, both made things worse):
    - listing ahead of PreStartContainer after each Allocate, to find the hint warm: 40-60
      background Lists per 250-pod burst, Allocate p99 ~6 ms -> 18-34 ms, to save one List;
    - sending Get as a future and reading the pod meanwhile: the answer is then handled on gRPC's
      channel-spin thread, one more GIL hand-off; PreStartContainer p50 1.9 -> 3.0 ms.
    """

    def __init__(self, socket_path: Path, *, timeout_s: float = 2.0, resource: str = GPU_CORE) -> None:
        self._socket = socket_path
        self._timeout = timeout_s
        self._resource = resource
        self._channel = grpc.insecure_channel(f"unix://{socket_path}", options=[("grpc.max_receive_message_length", _MAX_RECEIVE)])
        self._stub = pr_grpc.PodResourcesListerStub(self._channel)
        self._lock = threading.Condition()
        self._hint: dict[str, TokenHolder] = {}  # token -> holder, from the last List
        self._get_supported = True
        # Single-flight List: numbered as they start; a caller needs one numbered after its arrival.
        self._lists_started = 0
        self._listing = False
        self._last: list[TokenHolder] = []
        self._last_number = 0  # the number of the List `_last` came from
        self.lists = 0  # List calls made, for tests and benchmarks

    def _error(self, exc: grpc.RpcError) -> PodResourcesError:
        return PodResourcesError(
            f"cannot read pod resources on {self._socket} ({exc.code().name}); mount "
            "/var/lib/kubelet/pod-resources into the device plugin container"
        )

    def list_holders(self) -> list[TokenHolder]:
        """Every container holding the resource, from a List that began after this call."""
        with self._lock:
            needed = self._lists_started + 1
        return self._list_from(needed)

    def _list_from(self, needed: int) -> list[TokenHolder]:
        """The answer of List number `needed` or a later one: joins one under way, else lists."""
        with self._lock:
            while True:
                if self._last_number >= needed:
                    return list(self._last)
                if not self._listing:
                    break
                self._lock.wait()
            self._listing = True
            self._lists_started += 1
            number = self._lists_started
        holders: list[TokenHolder] | None = None
        hint: dict[str, TokenHolder] = {}
        try:
            self.lists += 1
            response = self._stub.List(pr.ListPodResourcesRequest(), timeout=self._timeout)
            holders = holders_from_response(response, self._resource)
            hint = {t: h for h in holders for t in h.tokens}
        except grpc.RpcError as exc:
            raise self._error(exc) from exc
        finally:
            with self._lock:
                # Publish the answer and release the waiters in one step, so no waiter sees "no List
                # running" without this List's answer and starts another.
                if holders is not None and number > self._last_number:
                    self._last, self._last_number, self._hint = holders, number, hint
                self._listing = False
                self._lock.notify_all()
        assert holders is not None  # set unless the List raised
        return holders

    def _hinted(self, wanted: frozenset[str]) -> TokenHolder | None:
        hint = self._hint.get(next(iter(wanted))) if wanted else None
        return hint if hint is not None and hint.tokens == wanted else None

    def holders_of(self, tokens: Sequence[str]) -> list[TokenHolder]:
        """The containers holding exactly `tokens` according to kubelet (normally one)."""
        wanted = frozenset(tokens)
        with self._lock:
            fresh_enough = self._lists_started + 1  # a List that begins after now knows our tokens
            hint = self._hinted(wanted)
            use_get = self._get_supported
        if hint is not None and use_get:
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
        return [h for h in self._list_from(fresh_enough) if h.tokens == wanted]

    def close(self) -> None:
        self._channel.close()
