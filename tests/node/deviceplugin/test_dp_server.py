"""The gRPC servicer's Allocate: cached answers never outlive their settings, foreign IDs fail."""
from __future__ import annotations

from typing import NoReturn

import grpc
import pytest

from tessera.model.contract import NodeGpu
from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.deviceplugin.core import AllocateSettings, Inventory
from tessera_node.deviceplugin.server import DevicePluginServicer, PluginState

INVENTORY = Inventory.of(NodeGpu(i, f"GPU-{i}", "H100-80GB", 81559) for i in range(2))


class Aborted(Exception):
    pass


class Context:
    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise Aborted(code, details)


def _allocate(servicer: DevicePluginServicer, *tokens: str) -> dp.ContainerAllocateResponse:
    request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=list(tokens))])
    return servicer.Allocate(request, Context()).container_responses[0]  # type: ignore[arg-type]


def test_the_answer_follows_a_policy_change() -> None:
    state = PluginState(INVENTORY, AllocateSettings(uses_mps=False, sharing_policy="best-effort"))
    servicer = DevicePluginServicer(state, lambda tokens: None)
    assert _allocate(servicer, "gpu0-core000").envs["TESSERA_SHARING_POLICY"] == "best-effort"
    assert not _allocate(servicer, "gpu1-core003").mounts
    state.set_allocate_settings(AllocateSettings(uses_mps=True, sharing_policy="fixed-share"))
    answer = _allocate(servicer, "gpu0-core001")
    assert answer.envs["TESSERA_SHARING_POLICY"] == "fixed-share"
    assert [m.container_path for m in answer.mounts] == ["/run/tessera/mps"]


@pytest.mark.parametrize(
    ("tokens", "reason"),
    [(("gpu7-core000",), "GPU 7"), (("gpu0-core100",), "gpuN-coreNNN"), (("gpu00-core001",), "advertised"), ((), "zero")],
)
def test_ids_this_plugin_never_advertised_are_refused(tokens: tuple[str, ...], reason: str) -> None:
    servicer = DevicePluginServicer(PluginState(INVENTORY, AllocateSettings()), lambda tokens: None)
    _allocate(servicer, "gpu0-core000")  # a cached answer must not let a bad request through
    with pytest.raises(Aborted) as refused:
        _allocate(servicer, "gpu0-core001", *tokens) if tokens else _allocate(servicer)
    assert refused.value.args[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in refused.value.args[1]


def test_handler_time_is_recorded_per_rpc() -> None:
    servicer = DevicePluginServicer(PluginState(INVENTORY, AllocateSettings()), lambda tokens: None)
    _allocate(servicer, "gpu0-core000")
    servicer.PreStartContainer(dp.PreStartContainerRequest(devices_ids=["gpu0-core000"]), Context())  # type: ignore[arg-type]
    timings = servicer.timings.snapshot()
    assert [len(timings["Allocate"]), len(timings["PreStartContainer"])] == [1, 1]
    assert all(wall >= 0 and cpu >= 0 for wall, cpu in timings["Allocate"] + timings["PreStartContainer"])
