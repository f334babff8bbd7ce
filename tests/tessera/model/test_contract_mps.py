"""The MPS thread percentage of a fixed share (`mps_thread_percentage`) and the SM count the node
reports for it (`NodeGpu.smCount`)."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.model.contract import NodeGpu, mps_provisioned_sms, mps_thread_percentage

# measured on an H100 80GB HBM3 (132 SMs, driver 580.159.04): CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
# -> the SM count the client's torch.cuda.get_device_properties reported (docs/benchmarks.md)
MEASURED_H100 = {100: 132, 80: 104, 70: 92, 61: 80, 60: 78, 50: 66, 40: 52, 34: 44, 31: 40, 30: 38, 25: 32, 20: 26, 10: 12}
SM_COUNTS = (40, 56, 58, 72, 78, 80, 108, 114, 132, 142)  # T4, A30, L4, A10, H20, V100, A100, H100 PCIe, H100/H200, L40S


@pytest.mark.parametrize("percentage, sms", sorted(MEASURED_H100.items()))
def test_the_mps_model_reproduces_what_an_h100_gave(percentage: int, sms: int) -> None:
    assert mps_provisioned_sms(percentage, 132) == sms


@pytest.mark.parametrize("core, sm_count, expected", [
    (60, 132, 61), (30, 132, 31), (50, 132, 50), (10, 132, 11), (100, 132, 100), (60, None, 60), (30, None, 30),
    (0, 132, 2), (150, 132, 100), (25, 108, 26), (30, 108, 30),
])
def test_percentages_users_see(core: int, sm_count: int | None, expected: int) -> None:
    assert mps_thread_percentage(core, sm_count) == expected


@given(core=st.integers(1, 99), sm_count=st.sampled_from(SM_COUNTS))
def test_a_share_gets_the_whole_tpcs_nearest_to_it(core: int, sm_count: int) -> None:
    percentage = mps_thread_percentage(core, sm_count)
    want = core * sm_count / 100
    got = mps_provisioned_sms(percentage, sm_count)
    assert abs(got - want) <= 1 or got == 2, f"{core} % of {sm_count} SMs is {want:.1f}; MPS would give {got}"
    assert abs(got - want) <= abs(mps_provisioned_sms(core, sm_count) - want), "never further from the share than the plain percent"
    assert 1 <= percentage <= 100
    assert abs(percentage - core) <= 2 or got == 2, "off by more than a TPC's percent only where the floor of one TPC lifts it"


@given(a=st.integers(1, 99), b=st.integers(1, 99), sm_count=st.sampled_from(SM_COUNTS))
def test_a_larger_share_never_gets_fewer_sms(a: int, b: int, sm_count: int) -> None:
    low, high = sorted((a, b))
    assert mps_provisioned_sms(mps_thread_percentage(low, sm_count), sm_count) <= mps_provisioned_sms(mps_thread_percentage(high, sm_count), sm_count)


def _gpu_json(**extra: Any) -> dict[str, Any]:
    return {"index": 0, "uuid": "GPU-0", "model": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559, "healthy": True, **extra}


def test_sm_count_round_trips_and_is_left_out_when_unknown() -> None:
    gpu = NodeGpu(0, "GPU-0", "NVIDIA H100 80GB HBM3", 81559, True, 132)
    assert gpu.to_json()["smCount"] == 132 and NodeGpu.from_json(gpu.to_json()) == gpu
    unknown = NodeGpu(0, "GPU-0", "T4", 15360)
    assert "smCount" not in unknown.to_json(), "an extender of the last release reads the annotation unchanged"
    assert NodeGpu.from_json(_gpu_json()).sm_count is None


@pytest.mark.parametrize("value", [0, -4, "132", 13.2, True])
def test_a_bad_sm_count_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="smCount must be a positive integer"):
        NodeGpu.from_json(_gpu_json(smCount=value))
