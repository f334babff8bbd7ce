"""What differs between kubelet releases, as far as a device plugin can tell, with the upstream
source each fact comes from (kubernetes/kubernetes; read through the project's source search, see
docs/device-plugin.md "kubelet versions"):

- PodResources `Get` (`pkg/kubelet/apis/podresources/server_v1.go`, `Get`): behind the
  `KubeletPodResourcesGet` feature gate (`pkg/features/kube_features.go`: alpha, default off, from
  1.27 through 1.33 — the 1.30 file has `KubeletPodResourcesGet: {Default: false, PreRelease:
  featuregate.Alpha}`; beta, default on, from 1.34: `{Version: version.MustParse("1.34"),
  Default: true, PreRelease: featuregate.Beta}`). Both errors of `Get` are plain `fmt.Errorf`,
  which grpc-go sends as status UNKNOWN with the text as the message:
    gate off:       `PodResources API Get method disabled`
    pod not known:  `pod <name> in namespace <namespace> not found`
  (seen from outside as `rpc error: code = Unknown desc = PodResources API Get method disabled`
  in NVIDIA's confidential-containers troubleshooting notes, where a runtime calls Get). Before 1.27 the v1 service had no `Get`, and
  grpc-go answers an unknown method with UNIMPLEMENTED `unknown method Get for service
  v1.PodResourcesLister`.
- Rate limit of the PodResources server (`pkg/kubelet/server/server.go` `ListenAndServePodResources`
  installs `apisgrpc.WithRateLimiter(..., podresources.DefaultQPS, podresources.DefaultBurstTokens)`;
  `pkg/kubelet/apis/{podresources/,}grpc/ratelimit.go`): a token bucket of 100 requests/s with a
  burst of 10 on unary calls, every client together; a rejected call gets RESOURCE_EXHAUSTED
  `rejected by rate limit`. Present in 1.30 and the newest release.
- `List` (`server_v1.go`) answers every active pod, each with its restartable init containers and
  its app containers (devices as kubelet's device manager recorded them); plain init containers are
  not listed.
- Device plugin registration (`pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go` `Register`,
  messages in `.../v1beta1/api.go`): errors are `fmt.Errorf`, so UNKNOWN:
    `requested API version "<v>" is not supported by kubelet. Supported version is ["v1beta1"]`
    `the ResourceName "<name>" is invalid`
    `failed to dial device plugin: <cause>` (`.../v1beta1/client.go`, 10 s dial timeout)
  unchanged between 1.30 and the newest release.
- On start the device manager (`pkg/kubelet/cm/devicemanager/manager.go`
  `CleanupPluginDirectory`, called from the registration server's `Start`) deletes the entries of
  the device-plugins directory except directories and its checkpoint `kubelet_internal_checkpoint`
  (older code: every such entry; the newest: sockets only — a plugin's socket goes either way; the
  emulator deletes every such entry, the harsher of the two), then serves a new `kubelet.sock`. It
  restores device assignments from the checkpoint (`checkpoint/checkpoint.go`: JSON
  `{"Data": {"PodDeviceEntries": [...], "RegisteredDevices": {...}}, "Checksum": ...}`).
- ListAndWatch: kubelet dials the plugin without a receive-size option (`.../v1beta1/client.go`
  `dial`), so grpc-go's default client limit applies: 4 MiB per message
  (`defaultClientMaxReceiveMessageSize = 1024 * 1024 * 4`, grpc-go `dialoptions.go`).
- PreStartContainer failures reach the pod as `device plugin PreStartContainer rpc failed with
  err: <status>` (`manager.go` `callPreStartContainerIfNeeded`).

The tags: the 1.30 facts were read from the 1.30 generation of these files (the feature list in
which 1.30 graduations are marked GA, `server_v1.go` with `useActivePods := true`); the newest from
the current `main` generation (versioned feature specs with the 1.34 beta entry). The search index
serves file versions by commit, not by tag, and the whole repository (1.9 GB) was over the fetch
limit, so the tag of each stored version was inferred from its content, not checked out.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# The messages, exactly as kubelet sends them.
GET_DISABLED = "PodResources API Get method disabled"
RATE_LIMITED = "rejected by rate limit"
GET_UNIMPLEMENTED = "unknown method Get for service v1.PodResourcesLister"
CHECKPOINT_FILE = "kubelet_internal_checkpoint"
SUPPORTED_DEVICE_PLUGIN_VERSIONS = ("v1beta1",)
MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # grpc-go's default receive limit, which kubelet keeps
DEFAULT_QPS = 100
DEFAULT_BURST = 10


def pod_not_found(namespace: str, name: str) -> str:
    return f"pod {name} in namespace {namespace} not found"


def unsupported_version(version: str) -> str:
    supported = "[" + " ".join(f'"{v}"' for v in SUPPORTED_DEVICE_PLUGIN_VERSIONS) + "]"  # Go's %q of a []string
    return f'requested API version "{version}" is not supported by kubelet. Supported version is {supported}'


def invalid_resource_name(name: str) -> str:
    return f'the ResourceName "{name}" is invalid'


@dataclass(frozen=True)
class KubeletVersion:
    """One kubelet release's behaviour towards device plugins and PodResources clients.

    name: the release, e.g. "1.30".
    has_get: whether the v1 PodResources service has `Get` at all (from 1.27).
    get_enabled: the `KubeletPodResourcesGet` gate as set on this kubelet (its default unless an
        operator passed `--feature-gates`).
    qps, burst: the PodResources rate limit (kubelet's defaults; 0 qps = no limit, for tests that
        look at something else).
    """

    name: str
    has_get: bool
    get_enabled: bool
    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST

    def with_gates(self, *, pod_resources_get: bool) -> KubeletVersion:
        """This release with `--feature-gates=KubeletPodResourcesGet=<value>`."""
        if not self.has_get:
            raise ValueError(f"kubelet {self.name} has no PodResources Get to enable")
        return KubeletVersion(self.name, self.has_get, pod_resources_get, self.qps, self.burst)


KUBELET_1_26 = KubeletVersion("1.26", has_get=False, get_enabled=False)
KUBELET_1_30 = KubeletVersion("1.30", has_get=True, get_enabled=False)  # what our stacks pin
KUBELET_1_34 = KubeletVersion("1.34", has_get=True, get_enabled=True)  # and every release since
VERSIONS = {v.name: v for v in (KUBELET_1_26, KUBELET_1_30, KUBELET_1_34)}


def kubelet_for(kubernetes_version: str) -> KubeletVersion:
    """The emulated release whose device-plugin and PodResources behaviour a cluster of
    `kubernetes_version` (e.g. "1.34.1") has: the newest listed release at or below its minor."""
    minor = int(kubernetes_version.split(".")[1])
    return max((v for v in VERSIONS.values() if int(v.name.split(".")[1]) <= minor), key=lambda v: int(v.name.split(".")[1]), default=KUBELET_1_26)


class TokenBucket:
    """golang.org/x/time/rate's `Limiter.Allow` as kubelet uses it: starts full (`burst` tokens),
    refills at `qps` per second, one token per call, never waits."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()
        self._lock = threading.Lock()
        self.rejected = 0

    def allow(self) -> bool:
        if self._qps <= 0:
            return True
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            self.rejected += 1
            return False
