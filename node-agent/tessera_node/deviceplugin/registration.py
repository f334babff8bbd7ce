"""Registering with kubelet and noticing when kubelet restarts.

A restarting kubelet re-creates `kubelet.sock` and deletes every plugin socket in the directory;
registrations are lost. The supervisor polls both sockets every `kubelet_poll_s` (default 100 ms,
no inotify: it works the same on every filesystem and in every container runtime) and re-creates
its socket and registers again when kubelet's socket changed identity or its own vanished.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import grpc

from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from tessera_node.deviceplugin.core import API_VERSION

KUBELET_SOCKET_NAME = "kubelet.sock"


class RegistrationError(Exception):
    """kubelet refused or could not be reached."""


@dataclass(frozen=True)
class SocketIdentity:
    """Identity of a socket file: a re-created socket has a new inode or change time."""

    inode: int
    ctime_ns: int

    @staticmethod
    def of(path: Path) -> SocketIdentity | None:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISSOCK(st.st_mode):
            return None
        return SocketIdentity(st.st_ino, st.st_ctime_ns)


def needs_registration(registered_with: SocketIdentity | None, kubelet_now: SocketIdentity | None, own_socket_present: bool) -> bool:
    """Whether to (re)start serving and register: kubelet is up and either we never registered with
    this kubelet instance or our socket was wiped."""
    if kubelet_now is None:
        return False
    return registered_with != kubelet_now or not own_socket_present


def register(kubelet_socket: Path, endpoint: str, resource: str, *, timeout_s: float = 5.0) -> None:
    """Registration.Register: tell kubelet our socket file name and resource, with our options."""
    request = dp.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint,
        resource_name=resource,
        options=dp.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True),
    )
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout_s)
            dp_grpc.RegistrationStub(channel).Register(request, timeout=timeout_s)
        except grpc.FutureTimeoutError as exc:
            raise RegistrationError(f"kubelet is not answering on {kubelet_socket}; is --device-plugin-dir right?") from exc
        except grpc.RpcError as exc:
            raise RegistrationError(f"kubelet refused registration of {resource}: {exc.details()}") from exc
