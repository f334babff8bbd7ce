"""A kubelet, as far as a DRA kubelet plugin can tell: its plugin watcher and its DRA client,
over the plugin's real unix sockets, for kubelet 1.34 and 1.36.

What it does, each step as kubelet does it (kubernetes/kubernetes, read through the project's
source search; file versions are served by commit, so each fact names its file and function):

- plugin watcher (pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go): every socket that
  appears in the registry directory, names starting with "." ignored, is registered; one that
  disappears is deregistered. kubelet uses fsnotify; this emulator polls (`poll_s`).
- registration (pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go
  `GenerateRegisterPluginFunc`, `notifyPlugin`): GetInfo with a 1 s timeout; a type with no
  handler, a failed validation or a failed registration is reported to the plugin through
  NotifyRegistrationStatus(plugin_registered=false, error=...), success with
  plugin_registered=true. An empty endpoint means the registration socket itself.
- the DRA handler (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go `ValidatePlugin`,
  `RegisterPlugin`, `validateSupportedServices`, `add`, `GetPlugin`): the "supported versions" are
  gRPC service names; kubelet takes the first one in the plugin's list it supports itself, in
  `servicesSupportedByKubelet` (dra_plugin.go); none: the error quoted in `no_common_service`.
  A second plugin instance may not take an endpoint already registered for the driver.
- calls (dra_plugin.go `NodePrepareResources` / `NodeUnprepareResources`): on the chosen service,
  45 s timeout (`defaultClientCallTimeout`). The response must have an entry for every claim;
  an entry's `error` fails that claim (pkg/kubelet/cm/dra/manager.go `prepareResources`).
- CDI ids for a container (pkg/kubelet/cm/dra/claiminfo.go `cdiDevicesAsList`): the ids of every
  device whose request names are empty or include the request the container names, in order,
  duplicates kept.

The versions (`VERSIONS`):

| | 1.34 | 1.36 |
|---|---|---|
| DRA gRPC services kubelet speaks (`servicesSupportedByKubelet`) | v1.DRAPlugin, v1beta1.DRAPlugin | v1.DRAPlugin, v1beta1.DRAPlugin |
| `DRAConsumableCapacity` (pkg/features/kube_features.go) | alpha, default off | beta, default on |
| what a claim on a shared GPU gets | the whole device (no consumedCapacity) | its consumed capacity |

The gate matters to the plugin through the API server and the scheduler: with it off, a slice's
`allowMultipleAllocations` and `requestPolicy` are dropped (`tessera.kube.fake_dra`) and results
carry no `consumedCapacity`; `tessera_node.testing.dra_claims.allocated_claim` writes a claim's
allocation accordingly, as kube-scheduler would.

Runtime side (what containerd/CRI-O do with CDI ids, cncf-tags/container-device-interface
SPEC.md): `resolve_cdi` reads the specs in a CDI directory and applies the named devices'
containerEdits (env "K=V" entries, mounts) as a runtime would.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc

from tessera.model.contract import DRA_DRIVER
from tessera_node.dra.api.dra.v1 import api_pb2 as v1
from tessera_node.dra.api.dra.v1 import api_pb2_grpc as v1_grpc
from tessera_node.dra.api.dra.v1beta1 import api_pb2 as v1beta1
from tessera_node.dra.api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from tessera_node.dra.api.pluginregistration.v1 import api_pb2 as reg
from tessera_node.dra.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc

log = logging.getLogger("tessera.kubelet-dra")

DRA_PLUGIN_TYPE: Final = "DRAPlugin"  # pluginregistration/v1/constants.go
GET_INFO_TIMEOUT_S: Final = 1.0  # operation_generator.go: context.WithTimeout(ctx, time.Second)
CALL_TIMEOUT_S: Final = 45.0  # dra_plugin.go defaultClientCallTimeout


@dataclass(frozen=True)
class KubeletDraVersion:
    """name: the release. services: `servicesSupportedByKubelet`, newest first.
    consumable_capacity: the `DRAConsumableCapacity` gate's default in that release."""

    name: str
    services: tuple[str, ...]
    consumable_capacity: bool


KUBELET_1_34: Final = KubeletDraVersion("1.34", ("v1.DRAPlugin", "v1beta1.DRAPlugin"), consumable_capacity=False)
KUBELET_1_36: Final = KubeletDraVersion("1.36", ("v1.DRAPlugin", "v1beta1.DRAPlugin"), consumable_capacity=True)
VERSIONS: Final = {v.name: v for v in (KUBELET_1_34, KUBELET_1_36)}
_APIS: Final = {"v1.DRAPlugin": (v1, v1_grpc), "v1beta1.DRAPlugin": (v1beta1, v1beta1_grpc)}


def go_quote_list(items: Sequence[str]) -> str:
    """Go's `%q` of a []string: ["a" "b"]."""
    return "[" + " ".join(json.dumps(i) for i in items) + "]"


def no_common_service(plugin_services: Sequence[str], kubelet_services: Sequence[str]) -> str:
    """`validateSupportedServices`' error when no service matches."""
    return f"none of services supported by the plugin ({go_quote_list(plugin_services)}) are supported by the kubelet ({go_quote_list(kubelet_services)})"


class KubeletDraError(Exception):
    """What kubelet would log or put into the pod's events."""


@dataclass
class RegisteredPlugin:
    driver: str
    endpoint: str
    service: str
    socket: Path


@dataclass
class ClaimResult:
    """One claim's entry in a NodePrepareResources response."""

    devices: list[tuple[tuple[str, ...], str, str, tuple[str, ...]]]  # (request names, pool, device, CDI ids)
    error: str


@dataclass
class KubeletDra:
    version: KubeletDraVersion
    registry_dir: Path
    poll_s: float = 0.05
    plugins: dict[str, list[RegisteredPlugin]] = field(default_factory=dict)
    refusals: list[tuple[Path, str]] = field(default_factory=list)  # (socket, error told to the plugin)
    _seen: set[Path] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    # --- plugin watcher ----------------------------------------------------------------------
    def start(self) -> KubeletDra:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name=f"kubelet-{self.version.name}-pluginwatcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(self.poll_s)

    def scan(self) -> None:
        """One pass of the watcher: register new sockets, deregister vanished ones."""
        present = {p for p in self.registry_dir.iterdir() if p.is_socket() and not p.name.startswith(".")} if self.registry_dir.is_dir() else set()
        for gone in sorted(self._seen - present):
            self._deregister(gone)
        for new in sorted(present - self._seen):
            self._seen.add(new)
            try:
                self._register(new)
            except KubeletDraError as exc:
                log.warning("%s", exc)

    def _register(self, socket: Path) -> None:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            client = reg_grpc.RegistrationStub(channel)
            try:
                info = client.GetInfo(reg.InfoRequest(), timeout=GET_INFO_TIMEOUT_S, wait_for_ready=True)
            except grpc.RpcError as exc:
                raise KubeletDraError(f"RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {socket}, err: {exc.details()}") from None
            if info.type != DRA_PLUGIN_TYPE:
                self._notify(client, socket, f"RegisterPlugin error -- no handler registered for plugin type: {info.type} at socket {socket}")
                return
            endpoint = info.endpoint or str(socket)
            try:
                service = self._validate(info.name, endpoint, list(info.supported_versions))
            except KubeletDraError as exc:
                self._notify(client, socket, f"RegisterPlugin error -- plugin validation failed with err: {exc}")
                return
            with self._lock:
                existing = self.plugins.setdefault(info.name, [])
                if any(p.endpoint == endpoint for p in existing):
                    error = f"endpoint {endpoint} already registered for DRA driver plugin {info.name}"
                else:
                    existing.append(RegisteredPlugin(info.name, endpoint, service, socket))
                    error = ""
            if error:
                self._notify(client, socket, f"RegisterPlugin error -- plugin registration failed with err: {error}")
                return
            client.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=GET_INFO_TIMEOUT_S)
        with self._changed:
            self._changed.notify_all()

    def _notify(self, client: reg_grpc.RegistrationStub, socket: Path, error: str) -> None:
        self.refusals.append((socket, error))
        client.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=False, error=error), timeout=GET_INFO_TIMEOUT_S)
        with self._changed:
            self._changed.notify_all()

    def _validate(self, driver: str, endpoint: str, services: list[str]) -> str:
        prefix = f"invalid supported gRPC versions of DRA driver plugin {driver} at endpoint {endpoint}: "
        if not services:
            raise KubeletDraError(prefix + "empty list of supported gRPC services (aka supported versions)")
        chosen = next((s for s in services if s in self.version.services), None)
        if chosen is None:
            raise KubeletDraError(prefix + no_common_service(services, self.version.services))
        return chosen

    def _deregister(self, socket: Path) -> None:
        self._seen.discard(socket)
        with self._lock:
            for driver, plugins in list(self.plugins.items()):
                self.plugins[driver] = [p for p in plugins if p.socket != socket]
                if not self.plugins[driver]:
                    del self.plugins[driver]

    def wait_registered(self, driver: str = DRA_DRIVER, timeout_s: float = 10.0) -> RegisteredPlugin:
        with self._changed:
            self._changed.wait_for(lambda: driver in self.plugins, timeout_s)
        plugin = self.plugin(driver)
        return plugin

    def plugin(self, driver: str = DRA_DRIVER) -> RegisteredPlugin:
        """`GetPlugin`: the most recently registered plugin of the driver."""
        if not driver:
            raise KubeletDraError("DRA driver name is empty")
        with self._lock:
            plugins = self.plugins.get(driver)
            if not plugins:
                raise KubeletDraError(f"DRA driver {driver} is not registered")
            return plugins[-1]

    # --- DRA client --------------------------------------------------------------------------
    def node_prepare(self, claims: Sequence[tuple[str, str, str]], driver: str = DRA_DRIVER) -> dict[str, ClaimResult]:
        """NodePrepareResources for (namespace, name, uid) claims; the raw per-claim results."""
        plugin = self.plugin(driver)
        api, api_grpc = _APIS[plugin.service]
        request = api.NodePrepareResourcesRequest(claims=[api.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims])
        with grpc.insecure_channel(f"unix://{plugin.endpoint}") as channel:
            response = api_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=CALL_TIMEOUT_S)
        return {
            uid: ClaimResult([(tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids)) for d in r.devices], r.error)
            for uid, r in response.claims.items()
        }

    def node_unprepare(self, claims: Sequence[tuple[str, str, str]], driver: str = DRA_DRIVER) -> dict[str, str]:
        plugin = self.plugin(driver)
        api, api_grpc = _APIS[plugin.service]
        request = api.NodeUnprepareResourcesRequest(claims=[api.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims])
        with grpc.insecure_channel(f"unix://{plugin.endpoint}") as channel:
            response = api_grpc.DRAPluginStub(channel).NodeUnprepareResources(request, timeout=CALL_TIMEOUT_S)
        return {uid: r.error for uid, r in response.claims.items()}

    def prepare(self, claims: Sequence[tuple[str, str, str]], driver: str = DRA_DRIVER) -> dict[str, ClaimResult]:
        """As kubelet's claim manager: every claim must be answered, without error."""
        results = self.node_prepare(claims, driver)
        missing = [uid for _, _, uid in claims if uid not in results]
        if missing:
            raise KubeletDraError(f"NodePrepareResources left out {len(missing)} claims")
        for ns, name, uid in claims:
            if results[uid].error:
                raise KubeletDraError(f"NodePrepareResources failed for ResourceClaim {ns}/{name}: {results[uid].error}")
        return results


def cdi_devices_for(results: Mapping[str, ClaimResult], claim_uid: str, request: str = "") -> list[str]:
    """`cdiDevicesAsList`: the CDI ids a container naming `request` of the claim (or the whole
    claim: "") is started with."""
    out: list[str] = []
    for names, _pool, _device, ids in results[claim_uid].devices:
        if not request or not names or request in names:
            out.extend(ids)
    return out


@dataclass(frozen=True)
class CdiResolution:
    env: dict[str, str]
    mounts: tuple[tuple[str, str], ...]  # (container path, host path)


def resolve_cdi(cdi_dir: Path, ids: Sequence[str]) -> CdiResolution:
    """Apply the containerEdits of the CDI devices `ids` ("<vendor>/<class>=<name>") found in the
    specs of `cdi_dir`, as a runtime does; an unknown id is an error (the container cannot start)."""
    devices: dict[str, Mapping[str, Any]] = {}
    for path in sorted(cdi_dir.glob("*.json")):
        spec = json.loads(path.read_text())
        for device in spec.get("devices") or []:
            devices[f"{spec['kind']}={device['name']}"] = device.get("containerEdits") or {}
    env: dict[str, str] = {}
    mounts: list[tuple[str, str]] = []
    for cdi_id in ids:
        if cdi_id not in devices:
            raise KubeletDraError(f"failed to inject CDI devices: unresolvable CDI devices {cdi_id}")
        edits = devices[cdi_id]
        for entry in edits.get("env") or []:
            key, _, value = str(entry).partition("=")
            env[key] = value
        mounts += [(str(m["containerPath"]), str(m["hostPath"])) for m in edits.get("mounts") or []]
    return CdiResolution(env, tuple(mounts))
