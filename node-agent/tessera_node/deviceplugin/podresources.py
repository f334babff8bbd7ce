"""Client of kubelet's PodResources API (v1, unix socket `pod-resources/kubelet.sock`).

Answers "which pod's container did kubelet give exactly these `tessera.dev/gpu-core` tokens":
kubelet's own record, so it names the right pod even when many pending pods ask for identical
amounts.

How kubelet answers, release by release (kubernetes/kubernetes, cited in
`tessera_node/testing/kubelet_versions.py`, which the tests' kubelet emulator follows):
- `List` exists everywhere; `Get` exists from 1.27 but is behind the `KubeletPodResourcesGet`
  feature gate, off by default until 1.33 and on from 1.34. With the gate off kubelet answers
  status UNKNOWN, message `PodResources API Get method disabled`; a pod it does not know is
  UNKNOWN too, message `pod <name> in namespace <ns> not found` (both are Go `fmt.Errorf`s);
  kubelets before 1.27 answer UNIMPLEMENTED. So the code alone cannot tell "no Get" from "no
  such pod": the message does.
- Every client together may make 100 calls/s with a burst of 10; past that kubelet answers
  RESOURCE_EXHAUSTED `rejected by rate limit` without doing anything.
"""
from __future__ import annotations

import bisect
import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tessera.model.contract import GPU_CORE
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2 as pr
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2_grpc as pr_grpc

log = logging.getLogger("tessera.deviceplugin")

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
# A dense node's List answer can exceed gRPC's default 4 MiB receive limit (dcgm-exporter raises it
# to 16 MiB for the same reason).
_MAX_RECEIVE = 16 * 1024 * 1024
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_RECEIVE),
    # After a kubelet restart the socket is back within a second or two; gRPC's default backoff
    # (1 s growing to 120 s) would keep failing starts long after. It is a local socket: cheap.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
KUBELET_GET_DISABLED = "PodResources API Get method disabled"
KUBELET_RATE_LIMITED = "rejected by rate limit"
_RETRY_FIRST_S = 0.01  # one token of kubelet's bucket at 100/s
_PREFETCH_BACKOFF_S = 1.0


@dataclass(frozen=True)
class TokenHolder:
    namespace: str
    pod: str
    container: str
    tokens: frozenset[str]


class PodResourcesError(Exception):
    """kubelet's PodResources API could not be reached."""


class GetAnswer(enum.Enum):
    """What a failed `Get` means (see the module docstring for kubelet's answers)."""

    POD_NOT_FOUND = "pod not found"  # a per-pod miss: ask List, keep using Get
    UNAVAILABLE = "Get unavailable"  # gate off, no such method, or an answer we cannot read: List from now on
    RATE_LIMITED = "rate limited"  # try again shortly
    UNREACHABLE = "kubelet unreachable"  # List would fail the same way


def classify_get_error(code: grpc.StatusCode, details: str, namespace: str, pod: str) -> GetAnswer:
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and details == KUBELET_RATE_LIMITED:
        return GetAnswer.RATE_LIMITED
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return GetAnswer.UNREACHABLE
    if code == grpc.StatusCode.NOT_FOUND or (code == grpc.StatusCode.UNKNOWN and details == f"pod {pod} in namespace {namespace} not found"):
        return GetAnswer.POD_NOT_FOUND
    return GetAnswer.UNAVAILABLE


def _tokens(container: pr.ContainerResources, resource: str) -> frozenset[str]:
    tokens: frozenset[str] = frozenset()
    for devices in container.devices:
        if devices.resource_name == resource:
            ids = frozenset(devices.device_ids[:])  # a slice is copied in C; iterating the field is not
            tokens = tokens | ids if tokens else ids
    return tokens


def holders_from_response(response: pr.ListPodResourcesResponse, resource: str = GPU_CORE) -> list[TokenHolder]:
    """Every container holding `resource` in a decoded List answer."""
    out = []
    for pod in response.pod_resources:
        out.extend(_holders_in(pod, resource))
    return out


def _holders_in(pod: pr.PodResources, resource: str) -> list[TokenHolder]:
    out = []
    for container in pod.containers:
        if container.devices:
            tokens = _tokens(container, resource)
            if tokens:
                out.append(TokenHolder(pod.namespace, pod.name, container.name, tokens))
    return out


def _device_id_field(token: str) -> bytes:
    """How `token` appears on the wire as a `ContainerDevices.device_ids` entry (field 2,
    length-delimited): tag, length, bytes. Device IDs are short, so the length is one byte."""
    raw = token.encode()
    return bytes((0x12, len(raw))) + raw if len(raw) < 0x80 else b"\x00"  # longer: never ours


class ListAnswer:
    """One `List` answer, kept as the bytes kubelet sent.

    Decoding a whole answer in Python costs ~40 us per pod (~10 ms on a 250-pod node, measured),
    and a container start needs one container. So the answer stays encoded: a token's wire bytes
    are searched in C, and only the pod around a match is decoded and checked (a match in some
    other field is simply not a holder). The pods' boundaries come from one walk over the
    top-level fields; an answer with fields this client does not expect is decoded in full.

    `number` orders the answers; `allocates_before` is how many Allocate calls had begun when the
    List was sent (see `PodResourcesClient.holders_of`).
    """

    def __init__(self, blob: bytes, number: int, allocates_before: int, resource: str) -> None:
        self.blob = blob
        self.number = number
        self.allocates_before = allocates_before
        self._resource = resource
        self._spans: list[tuple[int, int]] | None = None
        self._starts: list[int] = []
        self._decoded: pr.ListPodResourcesResponse | None = None

    def _pod_spans(self) -> list[tuple[int, int]] | None:
        if self._spans is None and self._decoded is None:
            blob, i, end, spans = self.blob, 0, len(self.blob), []
            try:
                while i < end:
                    tag, i = blob[i], i + 1
                    length, shift = 0, 0
                    while True:
                        byte, i = blob[i], i + 1
                        length |= (byte & 0x7F) << shift
                        if byte < 0x80:
                            break
                        shift += 7
                    if tag != 0x0A or i + length > end:
                        raise ValueError("not a plain list of pods")
                    spans.append((i, i + length))
                    i += length
            except (IndexError, ValueError):
                # Fields this client does not expect, or not protobuf at all: the general decoder
                # reads the former and raises a clear error for the latter.
                self._decoded = pr.ListPodResourcesResponse.FromString(blob)
                return None
            self._spans, self._starts = spans, [s for s, _ in spans]
        return self._spans

    def holders_of(self, wanted: frozenset[str]) -> list[TokenHolder]:
        """The containers holding exactly `wanted` in this answer."""
        spans = self._pod_spans()
        if spans is None:
            assert self._decoded is not None
            return [h for h in holders_from_response(self._decoded, self._resource) if h.tokens == wanted]
        needle = _device_id_field(min(wanted))
        found: dict[int, list[TokenHolder]] = {}
        at = self.blob.find(needle)
        while at >= 0:
            pod = bisect.bisect_right(self._starts, at) - 1
            if pod >= 0 and pod not in found:
                start, end = spans[pod]
                decoded = pr.PodResources.FromString(self.blob[start:end])
                found[pod] = [h for h in _holders_in(decoded, self._resource) if h.tokens == wanted]
            at = self.blob.find(needle, at + 1)
        return [h for holders in found.values() for h in holders]

    def all_holders(self) -> list[TokenHolder]:
        decoded = self._decoded or pr.ListPodResourcesResponse.FromString(self.blob)
        return holders_from_response(decoded, self._resource)


def _raw(message: Any) -> Any:
    return message  # the List answer is kept as bytes (see ListAnswer)


class PodResourcesClient:
    """Who holds which tokens, according to kubelet. One channel for the client's lifetime (gRPC
    reconnects it after kubelet restarts); safe to call from many threads.

    `holders_of` avoids calling kubelet where it can prove it need not. The last `List` answer is
    kept; it still names the holder of a token set T unless kubelet has given any token of T to
    another container since that List began. kubelet gives devices to a container only through
    the plugin's `Allocate` (devicemanager `allocateContainerResources`; it records the assignment
    after Allocate returns, and frees a pod's devices only after removing the pod from what List
    reports), and the plugin tells this client about every Allocate (`note_allocate`). So:
    - no Allocate touched T since the last List began: that List's holder of T is current; no
      call at all (a burst of pods: one List serves every start);
    - one did, and the List named a holder: ask `Get` for that one pod, if kubelet serves Get;
    - otherwise (no holder, a stale one, or no Get): `List` again, one that begins after this
      call arrived. Concurrent misses (kubelet's pod workers start containers in parallel) share
      one such List.
    - and, by `after_allocate`, a List in the background shortly after each Allocate: kubelet
      records the assignment as soon as Allocate returns and starts the container later, so a
      start usually finds its holder in a List that began after its Allocate (first bullet), or
      joins that List while it is under way.
    `Get` unavailable (see `GetAnswer`) is remembered for the process lifetime and logged once;
    a pod that Get does not know is a miss, not a reason to stop using Get. A call kubelet
    rejects for its rate limit is retried until the call's deadline.
    """

    def __init__(
        self, socket_path: Path, *, timeout_s: float = 2.0, resource: str = GPU_CORE, clock: Callable[[], float] = time.monotonic,
        prefetch_gap_s: float = 0.02,
    ) -> None:
        self._socket = socket_path
        self._timeout = timeout_s
        self._resource = resource
        self._clock = clock
        self._channel = grpc.insecure_channel(f"unix://{socket_path}", options=_CHANNEL_OPTIONS)
        self._stub = pr_grpc.PodResourcesListerStub(self._channel)
        self._list_raw = self._channel.unary_unary(
            "/v1.PodResourcesLister/List", request_serializer=pr.ListPodResourcesRequest.SerializeToString, response_deserializer=_raw
        )
        self._lock = threading.Condition()
        self._get_usable = True
        self.get_unavailable_reason: str | None = None  # why Get is not used, once known
        self._allocates = 0  # Allocate calls begun
        self._last_allocate: dict[str, int] = {}  # token -> number of the last Allocate that named it
        # Single-flight List: numbered as they start; a caller needs one numbered after its arrival.
        self._lists_started = 0
        self._listing = False
        self._listing_allocates_before = 0  # of the List under way
        self._last: ListAnswer | None = None
        # Looking up, in the background, who got the devices of the last Allocate (see after_allocate).
        self._prefetch_gap_s = prefetch_gap_s
        self._prefetch_for = 0  # Allocate count the lookup should cover
        self._prefetch_thread: threading.Thread | None = None
        self._closed = False
        self.prefetches = 0
        self.lists = 0  # List calls made, for tests and benchmarks
        self.gets = 0
        self.answered_from_last_list = 0
        self.rate_limited = 0

    # --- what the plugin tells us -----------------------------------------------------------
    def note_allocate(self, tokens: Iterable[str]) -> None:
        """An Allocate for `tokens` has begun (called before the plugin answers it)."""
        with self._lock:
            self._allocates += 1
            number = self._allocates
            for token in tokens:
                self._last_allocate[token] = number

    def after_allocate(self) -> None:
        """An Allocate is being answered. kubelet records the assignment as soon as it has the
        answer and starts the container later (after creating the pod sandbox, in practice
        100 ms or more), so a List made now in the background usually lets PreStartContainer
        answer without calling kubelet. At most one such List at a time, `prefetch_gap_s` apart
        (50/s at most, half kubelet's budget for all its clients), and none while a List that
        began after this Allocate is under way."""
        if self._prefetch_gap_s <= 0:
            return
        with self._lock:
            self._prefetch_for = self._allocates
            if self._prefetch_thread is None and not self._closed:
                self._prefetch_thread = threading.Thread(target=self._prefetch_loop, name="podresources-prefetch", daemon=True)
                self._prefetch_thread.start()
            self._lock.notify_all()

    def _covered(self) -> int:
        """Allocates a List begun so far covers (callers hold the lock)."""
        if self._listing:
            return self._listing_allocates_before
        return self._last.allocates_before if self._last is not None else 0

    def _prefetch_loop(self) -> None:
        last_start = float("-inf")
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._closed or self._prefetch_for > self._covered())
                if self._closed:
                    return
            # Let the Allocate answer reach kubelet first, and keep to the rate.
            time.sleep(max(0.001, last_start + self._prefetch_gap_s - self._clock()))
            with self._lock:
                if self._closed or self._prefetch_for <= self._covered():
                    continue
                needed = self._lists_started + 1
            last_start = self._clock()
            try:
                self._list_from(needed, wait_for_ready=False, retry_rate_limited=False)
                self.prefetches += 1  # background Lists answered, for tests and benchmarks
            except PodResourcesError as exc:
                # kubelet down, or its rate limit reached (other clients are busy): back off, the
                # starts list for themselves meanwhile.
                last_start = self._clock() + _PREFETCH_BACKOFF_S
                log.debug("background PodResources List failed: %s", exc)

    @property
    def get_usable(self) -> bool:
        with self._lock:
            return self._get_usable

    # --- lookups --------------------------------------------------------------------------
    def holders_of(self, tokens: Sequence[str]) -> list[TokenHolder]:
        """The containers holding exactly `tokens` according to kubelet (normally one)."""
        wanted = frozenset(tokens)
        if not wanted:
            return []
        with self._lock:
            fresh_enough = self._lists_started + 1  # a List that begins after now knows our tokens
            last = self._last
            current = last is not None and all(self._last_allocate.get(t, 0) <= last.allocates_before for t in wanted)
            use_get = self._get_usable
        if last is not None:
            known = last.holders_of(wanted)
            if known and current:
                with self._lock:
                    self.answered_from_last_list += 1
                return known
            if len(known) == 1 and use_get:
                confirmed = self._confirm(known[0], wanted)
                if confirmed is not None:
                    return [confirmed]
        joined = self._join_list_under_way(wanted)
        if joined:
            return joined
        return self._list_from(fresh_enough).holders_of(wanted)

    def _join_list_under_way(self, wanted: frozenset[str]) -> list[TokenHolder]:
        """The holder from a List already under way that began after the tokens' Allocate (a
        background one, usually), if it names one and no Allocate named the tokens since."""
        with self._lock:
            newest = max(self._last_allocate.get(t, 0) for t in wanted)
            if not self._listing or self._listing_allocates_before < newest:
                return []
            number = self._lists_started
        answer = self._list_from(number)
        with self._lock:
            if any(self._last_allocate.get(t, 0) > answer.allocates_before for t in wanted):
                return []
        return answer.holders_of(wanted)

    def list_holders(self) -> list[TokenHolder]:
        """Every container holding the resource, from a List that began after this call. For
        background work: fails at once while kubelet is down instead of waiting for it."""
        with self._lock:
            needed = self._lists_started + 1
        return self._list_from(needed, wait_for_ready=False).all_holders()

    def _confirm(self, hint: TokenHolder, wanted: frozenset[str]) -> TokenHolder | None:
        """`hint` if kubelet's Get says that pod's container still holds exactly `wanted`."""
        request = pr.GetPodResourcesRequest(pod_name=hint.pod, pod_namespace=hint.namespace)
        try:
            with self._lock:
                self.gets += 1
            answer = self._call(self._stub.Get, request)
        except grpc.RpcError as exc:
            outcome = classify_get_error(exc.code(), exc.details() or "", hint.namespace, hint.pod)
            if outcome is GetAnswer.UNREACHABLE:
                raise self._error(exc) from exc
            if outcome is GetAnswer.UNAVAILABLE:
                self._stop_using_get(exc)
            return None  # POD_NOT_FOUND, or rate limited past the deadline: List decides
        found = [h for h in _holders_in(answer.pod_resources, self._resource) if h.tokens == wanted and h.container == hint.container]
        return found[0] if found else None

    def _stop_using_get(self, exc: grpc.RpcError) -> None:
        with self._lock:
            if not self._get_usable:
                return
            self._get_usable = False
            self.get_unavailable_reason = f"{exc.code().name}: {exc.details()}"
        log.info(
            "kubelet does not serve PodResources Get (%s): the KubeletPodResourcesGet feature gate is off (the default "
            "before Kubernetes 1.34) or kubelet predates it; finding containers with List from now on",
            self.get_unavailable_reason,
        )

    def _list_from(self, needed: int, *, wait_for_ready: bool = True, retry_rate_limited: bool = True) -> ListAnswer:
        """The answer of List number `needed` or a later one: joins one under way, else lists."""
        with self._lock:
            while True:
                if self._last is not None and self._last.number >= needed:
                    return self._last
                if not self._listing:
                    break
                self._lock.wait()
            self._listing = True
            self._lists_started += 1
            number = self._lists_started
            allocates_before = self._listing_allocates_before = self._allocates
        answer: ListAnswer | None = None
        try:
            self.lists += 1
            blob = self._call(self._list_raw, pr.ListPodResourcesRequest(), wait_for_ready=wait_for_ready, retry_rate_limited=retry_rate_limited)
            answer = ListAnswer(blob, number, allocates_before, self._resource)
        except grpc.RpcError as exc:
            raise self._error(exc) from exc
        finally:
            with self._lock:
                # Publish the answer and release the waiters in one step, so no waiter sees "no List
                # running" without this List's answer and starts another.
                if answer is not None and (self._last is None or number > self._last.number):
                    self._last = answer
                self._listing = False
                self._lock.notify_all()
        return answer

    def _call(self, method: Callable[..., Any], request: Any, *, wait_for_ready: bool = True, retry_rate_limited: bool = True) -> Any:
        """One unary call, retried while kubelet's rate limit rejects it, within the timeout.
        By default it waits for the channel: kubelet is calling us, so a PodResources socket
        that is not connected yet is one coming back after a restart."""
        deadline = self._clock() + self._timeout
        delay = _RETRY_FIRST_S
        while True:
            try:
                return method(request, timeout=max(deadline - self._clock(), 0.001), wait_for_ready=wait_for_ready)
            except grpc.RpcError as exc:
                limited = exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and exc.details() == KUBELET_RATE_LIMITED
                if not limited or not retry_rate_limited or self._clock() + delay >= deadline:
                    raise
                with self._lock:
                    self.rate_limited += 1
                    first = self.rate_limited == 1
                if first:
                    log.warning("kubelet's PodResources rate limit (100 calls/s, burst 10, for all its clients) rejected a call; retrying")
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    def _error(self, exc: grpc.RpcError) -> PodResourcesError:
        return PodResourcesError(
            f"cannot read pod resources on {self._socket} ({exc.code().name}: {exc.details()}); mount "
            "/var/lib/kubelet/pod-resources into the device plugin container"
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._prefetch_thread is not None:
            self._prefetch_thread.join(self._timeout + 1)
        self._channel.close()
