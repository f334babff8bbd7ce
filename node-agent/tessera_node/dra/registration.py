"""Registering with kubelet's plugin watcher: the Registration service on `<driver>-reg.sock`.

kubelet's plugin manager watches `/var/lib/kubelet/plugins_registry/` for sockets
(pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go) and, for each new one
(pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go `GenerateRegisterPluginFunc`):
dials it, calls `GetInfo` (1 s timeout), picks the handler for `PluginInfo.type` ("DRAPlugin":
staging/src/k8s.io/kubelet/pkg/apis/pluginregistration/v1/constants.go), has it validate and
register `name`, `endpoint` and `supported_versions`, and reports the outcome with
`NotifyRegistrationStatus` (`plugin_registered`, and `error` when refused, e.g. `RegisterPlugin
error -- plugin validation failed with err: ...`). A socket that disappears deregisters the
plugin.

For DRA the "versions" are gRPC service names, `<package>.<service>` (pkg/kubelet/cm/dra/plugin/
dra_plugin_manager.go `RegisterPlugin`): kubelet takes the first one in the plugin's list that it
supports (`validateSupportedServices`). Kubelets 1.34 and 1.36 support "v1.DRAPlugin" and
"v1beta1.DRAPlugin" (dra_plugin.go `servicesSupportedByKubelet`); the plugin serves both, newest
first, so each kubelet uses v1 and an older or newer one still finds a version it speaks.
The endpoint is the DRA socket, `/var/lib/kubelet/plugins/<driver>/dra.sock` by convention
(k8s.io/dynamic-resource-allocation kubeletplugin), which kubelet dials for every call after.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc

from tessera_node.dra.api.pluginregistration.v1 import api_pb2 as reg
from tessera_node.dra.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc

log = logging.getLogger("tessera.dra")

PLUGIN_TYPE: Final = "DRAPlugin"
SERVICE_V1: Final = "v1.DRAPlugin"
SERVICE_V1BETA1: Final = "v1beta1.DRAPlugin"
SUPPORTED_SERVICES: Final = (SERVICE_V1, SERVICE_V1BETA1)  # most recent first, as kubelet lists its own
DEFAULT_REGISTRY_DIR: Final = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_PLUGINS_DIR: Final = Path("/var/lib/kubelet/plugins")


def registration_socket(registry_dir: Path, driver: str) -> Path:
    return registry_dir / f"{driver}-reg.sock"


def plugin_socket(plugins_dir: Path, driver: str) -> Path:
    return plugins_dir / driver / "dra.sock"


@dataclass(frozen=True)
class RegistrationStatus:
    registered: bool
    error: str


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """Answers kubelet's plugin watcher; remembers what kubelet said last."""

    def __init__(self, driver: str, endpoint: Path, on_status: Callable[[RegistrationStatus], None] | None = None) -> None:
        self._driver = driver
        self._endpoint = endpoint
        self._on_status = on_status or (lambda status: None)
        self._cond = threading.Condition()
        self.status: RegistrationStatus | None = None

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(type=PLUGIN_TYPE, name=self._driver, endpoint=str(self._endpoint), supported_versions=list(SUPPORTED_SERVICES))

    def NotifyRegistrationStatus(self, request: reg.RegistrationStatus, context: grpc.ServicerContext) -> reg.RegistrationStatusResponse:
        status = RegistrationStatus(request.plugin_registered, request.error)
        if status.registered:
            log.info("kubelet registered DRA driver %s at %s", self._driver, self._endpoint)
        else:
            log.error("kubelet refused DRA driver %s: %s", self._driver, status.error or "(no reason given)")
        with self._cond:
            self.status = status
            self._cond.notify_all()
        self._on_status(status)
        return reg.RegistrationStatusResponse()

    def wait(self, timeout_s: float) -> RegistrationStatus | None:
        """The first status kubelet reports, or None if none came within `timeout_s`."""
        with self._cond:
            self._cond.wait_for(lambda: self.status is not None, timeout_s)
            return self.status
