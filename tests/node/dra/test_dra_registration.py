"""Registration through kubelet's plugin watcher, as kubelet 1.34 and 1.36 do it, over the plugin's
real sockets; and the version kubelet picks."""
from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from dra_harness import DraNode

from tessera.model.contract import DRA_DRIVER
from tessera_node.dra.api.pluginregistration.v1 import api_pb2 as reg
from tessera_node.dra.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from tessera_node.dra.registration import SUPPORTED_SERVICES, RegistrationServicer
from tessera_node.testing.kubelet_dra import KUBELET_1_34, KUBELET_1_36, KubeletDra, KubeletDraError, KubeletDraVersion, no_common_service


@pytest.fixture(params=[KUBELET_1_34, KUBELET_1_36], ids=lambda v: f"kubelet-{v.name}")
def version_node(request: pytest.FixtureRequest) -> Iterator[DraNode]:
    harness = DraNode(version=request.param)
    harness.start_plugin()
    yield harness
    harness.close()


def test_the_plugin_registers_and_kubelet_speaks_v1(version_node: DraNode) -> None:
    plugin = version_node.start_kubelet().plugin()
    assert plugin.driver == DRA_DRIVER
    assert plugin.service == "v1.DRAPlugin"  # the first of the plugin's list that kubelet supports
    assert plugin.endpoint == str(version_node.settings.dra_socket)
    assert plugin.socket == version_node.settings.registry_dir / f"{DRA_DRIVER}-reg.sock"
    deadline = time.monotonic() + 5
    while not version_node.ready and time.monotonic() < deadline:
        time.sleep(0.01)
    assert version_node.ready and "ready: DRA driver gpu.tessera.dev serving 2 x T4" in version_node.ready[0].line()


def test_the_plugin_offers_both_services_newest_first() -> None:
    assert SUPPORTED_SERVICES == ("v1.DRAPlugin", "v1beta1.DRAPlugin")


def test_a_removed_registration_socket_deregisters_and_the_plugin_serves_it_again(version_node: DraNode) -> None:
    kubelet = version_node.start_kubelet()
    socket = version_node.settings.registration_socket
    socket.unlink()
    kubelet.scan()
    with pytest.raises(KubeletDraError, match=f"DRA driver {DRA_DRIVER} is not registered"):
        kubelet.plugin()
    assert kubelet.wait_registered(timeout_s=5).socket == socket  # the supervisor re-created it


class _Plugin(reg_grpc.RegistrationServicer):
    """A registration socket that answers what a test wants (another plugin on the node)."""

    def __init__(self, info: reg.PluginInfo) -> None:
        self.info = info
        self.statuses: list[reg.RegistrationStatus] = []

    def GetInfo(self, request, context):  # type: ignore[no-untyped-def]
        return self.info

    def NotifyRegistrationStatus(self, request, context):  # type: ignore[no-untyped-def]
        self.statuses.append(request)
        return reg.RegistrationStatusResponse()


def _serve(path: Path, servicer: reg_grpc.RegistrationServicer) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    reg_grpc.add_RegistrationServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server


@pytest.mark.parametrize("version", [KUBELET_1_34, KUBELET_1_36], ids=lambda v: v.name)
@pytest.mark.parametrize(
    ("info", "chosen", "error"),
    [
        (reg.PluginInfo(type="DRAPlugin", name="x.example.com", endpoint="/e.sock", supported_versions=["v1beta1.DRAPlugin"]), "v1beta1.DRAPlugin", None),
        (reg.PluginInfo(type="DRAPlugin", name="x.example.com", endpoint="/e.sock", supported_versions=["v1alpha4.Node", "v1.DRAPlugin"]), "v1.DRAPlugin", None),
        (
            reg.PluginInfo(type="DRAPlugin", name="x.example.com", endpoint="/e.sock", supported_versions=["v1alpha4.Node"]),
            None,
            "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC versions of DRA driver plugin x.example.com at endpoint /e.sock: "
            + no_common_service(["v1alpha4.Node"], ["v1.DRAPlugin", "v1beta1.DRAPlugin"]),
        ),
        (
            reg.PluginInfo(type="DRAPlugin", name="x.example.com", endpoint="/e.sock"),
            None,
            "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC versions of DRA driver plugin x.example.com at endpoint /e.sock: "
            "empty list of supported gRPC services (aka supported versions)",
        ),
        (reg.PluginInfo(type="CSIPlugin", name="x.example.com"), None, "RegisterPlugin error -- no handler registered for plugin type: CSIPlugin at socket {socket}"),
    ],
)
def test_kubelet_validates_registrations_as_upstream(tmp_path: Path, version: KubeletDraVersion, info: reg.PluginInfo, chosen: str | None, error: str | None) -> None:
    sockets = Path(tmp_path) / "r"
    sockets.mkdir()
    socket = sockets / "x-reg.sock"
    plugin = _Plugin(info)
    server = _serve(socket, plugin)
    kubelet = KubeletDra(version, sockets)
    try:
        kubelet.scan()
        (status,) = plugin.statuses
        if chosen is not None:
            assert status.plugin_registered and kubelet.plugin("x.example.com").service == chosen
        else:
            assert not status.plugin_registered
            assert status.error == (error or "").format(socket=socket)
    finally:
        server.stop(0)


def test_no_common_service_quotes_lists_as_go_does() -> None:
    assert no_common_service(["a"], ["v1.DRAPlugin", "v1beta1.DRAPlugin"]) == (
        'none of services supported by the plugin (["a"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])'
    )


def test_a_second_instance_may_not_take_a_registered_endpoint(tmp_path: Path) -> None:
    sockets = tmp_path / "r"
    sockets.mkdir()
    info = reg.PluginInfo(type="DRAPlugin", name="x.example.com", endpoint="/same.sock", supported_versions=["v1.DRAPlugin"])
    first, second = _Plugin(info), _Plugin(info)
    servers = [_serve(sockets / "a-reg.sock", first), _serve(sockets / "b-reg.sock", second)]
    try:
        KubeletDra(KUBELET_1_36, sockets).scan()
        assert first.statuses[0].plugin_registered
        assert second.statuses[0].error == "RegisterPlugin error -- plugin registration failed with err: endpoint /same.sock already registered for DRA driver plugin x.example.com"
    finally:
        for server in servers:
            server.stop(0)


def test_a_refusal_is_logged_and_kept(tmp_path: Path) -> None:
    servicer = RegistrationServicer(DRA_DRIVER, tmp_path / "dra.sock")
    servicer.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=False, error="no"), None)  # type: ignore[arg-type]
    status = servicer.wait(0)
    assert status is not None and not status.registered and status.error == "no"
