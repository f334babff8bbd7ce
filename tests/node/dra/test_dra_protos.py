"""The committed DRA and plugin registration bindings are what scripts/gen-protos.sh produces from
the upstream protos copied verbatim, and their wire names are kubelet's."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tessera_node.dra.api.dra.v1 import api_pb2 as v1
from tessera_node.dra.api.dra.v1beta1 import api_pb2 as v1beta1
from tessera_node.dra.api.pluginregistration.v1 import api_pb2 as reg

ROOT = Path(__file__).resolve().parents[3]
API = Path("tessera_node/dra/api")
PROTOS = [API / "dra/v1", API / "dra/v1beta1", API / "pluginregistration/v1"]


def test_regenerating_the_bindings_reproduces_the_committed_files(tmp_path: Path) -> None:
    subprocess.run(["bash", str(ROOT / "scripts/gen-protos.sh"), str(tmp_path)], check=True, cwd=ROOT, timeout=120)
    for folder in PROTOS:
        for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
            rel = folder / name
            assert (tmp_path / rel).read_text() == (ROOT / "node-agent" / rel).read_text(), f"{rel} is stale: run scripts/gen-protos.sh"


@pytest.mark.parametrize("folder", PROTOS)
def test_each_proto_cites_its_upstream_file(folder: Path) -> None:
    text = (ROOT / "node-agent" / folder / "api.proto").read_text()
    upstream = f"staging/src/k8s.io/kubelet/pkg/apis/{folder.relative_to(API)}/api.proto"
    assert upstream in text.split("syntax", 1)[0] and "verbatim" in text


@pytest.mark.parametrize(
    ("service", "full_name", "methods"),
    [
        (v1.DESCRIPTOR.services_by_name["DRAPlugin"], "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin", {"NodePrepareResources", "NodeUnprepareResources"}),
        (v1beta1.DESCRIPTOR.services_by_name["DRAPlugin"], "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin", {"NodePrepareResources", "NodeUnprepareResources"}),
        (reg.DESCRIPTOR.services_by_name["Registration"], "pluginregistration.Registration", {"GetInfo", "NotifyRegistrationStatus"}),
    ],
)
def test_services_carry_kubelets_full_names(service, full_name, methods) -> None:  # type: ignore[no-untyped-def]
    assert service.full_name == full_name
    assert {m.name for m in service.methods} == methods


@pytest.mark.parametrize("api", [v1, v1beta1])
@pytest.mark.parametrize(
    ("message", "fields"),
    [
        ("Claim", {"namespace": 1, "uid": 2, "name": 3}),
        ("Device", {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}),
        ("NodePrepareResourceResponse", {"devices": 1, "error": 2}),
        ("NodeUnprepareResourceResponse", {"error": 1}),
        ("NodePrepareResourcesRequest", {"claims": 1}),
    ],
)
def test_dra_field_numbers_match_the_upstream_api(api, message, fields) -> None:  # type: ignore[no-untyped-def]
    assert {f.name: f.number for f in getattr(api, message).DESCRIPTOR.fields} == fields


def test_registration_field_numbers_match_the_upstream_api() -> None:
    assert {f.name: f.number for f in reg.PluginInfo.DESCRIPTOR.fields} == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert {f.name: f.number for f in reg.RegistrationStatus.DESCRIPTOR.fields} == {"plugin_registered": 1, "error": 2}
