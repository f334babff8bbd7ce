"""The committed bindings are what scripts/gen-protos.sh produces, and the wire names match kubelet's."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tessera_node.deviceplugin.api.deviceplugin.v1beta1 import api_pb2 as dp
from tessera_node.deviceplugin.api.podresources.v1 import api_pb2 as pr

ROOT = Path(__file__).resolve().parents[3]
API = Path("tessera_node/deviceplugin/api")
GENERATED = [
    API / "deviceplugin/v1beta1/api_pb2.py",
    API / "deviceplugin/v1beta1/api_pb2.pyi",
    API / "deviceplugin/v1beta1/api_pb2_grpc.py",
    API / "podresources/v1/api_pb2.py",
    API / "podresources/v1/api_pb2.pyi",
    API / "podresources/v1/api_pb2_grpc.py",
]


def test_regenerating_the_bindings_reproduces_the_committed_files(tmp_path: Path) -> None:
    subprocess.run(["bash", str(ROOT / "scripts/gen-protos.sh"), str(tmp_path)], check=True, cwd=ROOT, timeout=120)
    for rel in GENERATED:
        assert (tmp_path / rel).read_text() == (ROOT / "node-agent" / rel).read_text(), f"{rel} is stale: run scripts/gen-protos.sh"


@pytest.mark.parametrize(
    ("service", "methods"),
    [
        (dp.DESCRIPTOR.services_by_name["Registration"], {"Register"}),
        (dp.DESCRIPTOR.services_by_name["DevicePlugin"], {"GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate", "PreStartContainer"}),
        (pr.DESCRIPTOR.services_by_name["PodResourcesLister"], {"List", "GetAllocatableResources", "Get"}),
    ],
)
def test_services_carry_kubelets_full_names(service, methods) -> None:  # type: ignore[no-untyped-def]
    assert service.full_name in {"v1beta1.Registration", "v1beta1.DevicePlugin", "v1.PodResourcesLister"}
    assert {m.name for m in service.methods} == methods


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        (dp.RegisterRequest, {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}),
        (dp.DevicePluginOptions, {"pre_start_required": 1, "get_preferred_allocation_available": 2}),
        (dp.Device, {"ID": 1, "health": 2, "topology": 3}),
        (dp.ContainerPreferredAllocationRequest, {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}),
        (dp.ContainerAllocateResponse, {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}),
        (dp.PreStartContainerRequest, {"devices_ids": 1}),
        (pr.ContainerResources, {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5}),
        (pr.ContainerDevices, {"resource_name": 1, "device_ids": 2, "topology": 3}),
    ],
)
def test_field_numbers_match_the_upstream_api(message, fields) -> None:  # type: ignore[no-untyped-def]
    assert {f.name: f.number for f in message.DESCRIPTOR.fields} == fields
