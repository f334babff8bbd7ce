"""CDI specs: the format of SPEC.md, the device plugin route's env, MPS mounts only where MPS runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera.model.allocation_record import configmap_data
from tessera.model.contract import Allocation, GpuShare, NodeGpu
from tessera.model.pool_policy import PoolPolicy
from tessera_node.dra.cdi import CdiSettings, CdiSpecs, cdi_device_id, claim_edits, spec_for, spec_path

GPUS = [NodeGpu(0, "GPU-a", "H100", 81559, True, 132), NodeGpu(1, "GPU-b", "H100", 81559, True, 132)]
SHARES = (GpuShare(0, "GPU-a", 60, 20480),)


@pytest.mark.parametrize("sharing", ["fixed-share", "best-effort", "burst-share"])
def test_the_env_is_the_allocation_configmaps_for_the_same_share(sharing: str) -> None:
    policy = PoolPolicy(sharing=sharing)  # type: ignore[arg-type]
    edits = claim_edits(SHARES, GPUS, policy, CdiSettings(), claim="ns/c")
    env = dict(e.split("=", 1) for e in edits["env"])
    # what the extender writes for the device plugin route (the webhook injects it per container)
    configmap = configmap_data(Allocation("n1", "t", {"main": SHARES}), {0: 81559}, mps=policy.uses_mps, sm_counts={0: 132})
    assert {f"main.{k}": v for k, v in env.items() if not k.startswith("TESSERA_DRA") and k != "TESSERA_SHARING_POLICY"} == configmap
    assert env["TESSERA_SHARING_POLICY"] == sharing and env["TESSERA_DRA_CLAIM"] == "ns/c"
    assert ("mounts" in edits) == (sharing == "fixed-share")


def test_fixed_share_mounts_the_mps_pipes_and_the_shm_dir_when_configured() -> None:
    settings = CdiSettings(mps_pipe_host_dir="/run/tessera/mps", mps_shm_host_dir="/run/tessera/mps/shm")
    edits = claim_edits(SHARES, GPUS, PoolPolicy(sharing="fixed-share"), settings, claim="ns/c")
    assert edits["mounts"] == [
        {"hostPath": "/run/tessera/mps", "containerPath": "/run/tessera/mps", "options": ["rbind", "rw"]},
        {"hostPath": "/run/tessera/mps/shm", "containerPath": "/dev/shm", "options": ["rbind", "rw"]},
    ]


def test_a_spec_file_per_claim_named_as_cdi_names_transient_specs(tmp_path: Path) -> None:
    specs = CdiSpecs(tmp_path / "cdi")
    assert specs.write("1234-abcd", {"env": ["A=1"]}) == cdi_device_id("1234-abcd") == "tessera.dev/gpu=1234-abcd"
    path = spec_path(tmp_path / "cdi", "1234-abcd")
    assert path.name == "tessera.dev-gpu_1234-abcd.json"
    assert json.loads(path.read_text()) == {"cdiVersion": "0.6.0", "kind": "tessera.dev/gpu", "devices": [{"name": "1234-abcd", "containerEdits": {"env": ["A=1"]}}]}
    assert specs.claim_uids() == {"1234-abcd"}
    specs.remove("1234-abcd")
    specs.remove("1234-abcd")
    assert specs.claim_uids() == set() and specs.read("1234-abcd") is None


def test_a_uid_that_cannot_name_a_cdi_device_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot name a CDI device"):
        spec_for("../etc", {})
