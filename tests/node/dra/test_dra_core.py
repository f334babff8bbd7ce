"""The pure core: quantities, shares from allocation results, and the containers that use a claim."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tessera.model.contract import GpuShare, NodeGpu
from tessera.model.pool_policy import PoolPolicy
from tessera.model.quantity import parse_quantity
from tessera_node.dra.core import ClaimError, ClaimRef, PreparedDevice, allocated_devices, consumers, merge_shares
from tessera_node.registry import AppClass
from tessera_node.testing.dra_claims import Grant, allocated_claim, pod_using_claim

GPUS = [NodeGpu(0, "GPU-a", "T4", 15360, True, 40), NodeGpu(1, "GPU-b", "T4", 15360, True, 40)]


@pytest.mark.parametrize(
    ("text", "value"),
    [("50", Decimal(50)), ("4Gi", Decimal(4 * 2**30)), ("4096Mi", Decimal(4096 * 2**20)), ("1.5G", Decimal("1.5e9")), ("100m", Decimal("0.1")), (7, Decimal(7))],
)
def test_quantities_read_as_kubernetes_writes_them(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "lots", "4Qi", "NaN", "Infinity"])
def test_unreadable_quantities_are_value_errors(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


def _claim(**kw: Any) -> tuple[ClaimRef, dict[str, Any]]:
    body = allocated_claim("ns", "c", kw.pop("grants", [Grant("n1", 0, 30, 4096)]), **kw)
    return ClaimRef("ns", "c", body["metadata"]["uid"]), body


@pytest.mark.parametrize(
    ("memory", "mib"),
    [("4096Mi", 4096), ("4Gi", 4096), ("4294967296", 4096), ("1", 1), ("1500000", 2)],  # rounded up to whole MiB
)
def test_consumed_memory_becomes_whole_mib(memory: str, mib: int) -> None:
    ref, body = _claim()
    body["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"] = memory
    (device,) = allocated_devices(ref, body, pool="n1", gpus=GPUS)
    assert device.share == GpuShare(0, "GPU-a", 30, mib)


def test_a_device_allocated_whole_is_the_whole_gpu() -> None:
    ref, body = _claim(consumable_capacity=False)
    (device,) = allocated_devices(ref, body, pool="n1", gpus=GPUS)
    assert device.share == GpuShare(0, "GPU-a", 100, 15360) and device.share_id is None


def test_results_of_other_drivers_are_not_ours() -> None:
    ref, body = _claim(grants=[Grant("n1", 0, 30, 1024), Grant("n1", 1, 40, 2048, request="b")])
    body["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.nvidia.com"
    (device,) = allocated_devices(ref, body, pool="n1", gpus=GPUS)
    assert (device.request, device.device) == ("b", "gpu-1")


@pytest.mark.parametrize("cores", ["0", "101", "30.5", "-1"])
def test_cores_must_be_whole_percent_of_one_gpu(cores: str) -> None:
    ref, body = _claim()
    body["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"] = cores
    with pytest.raises(ClaimError, match=f"consumes {cores} cores; the device has 100"):
        allocated_devices(ref, body, pool="n1", gpus=GPUS)


def test_two_requests_on_one_gpu_add_up() -> None:
    shares = merge_shares([GpuShare(0, "GPU-a", 30, 1024), GpuShare(1, "GPU-b", 10, 10), GpuShare(0, "GPU-a", 20, 512)])
    assert shares == (GpuShare(0, "GPU-a", 50, 1536), GpuShare(1, "GPU-b", 10, 10))


DEVICES = (PreparedDevice("gpu", "n1", "gpu-0", GpuShare(0, "GPU-a", 30, 4096)),)
REF = ClaimRef("ns", "c", "uid-c")


def _pod(**kw: Any) -> dict[str, Any]:
    pod = pod_using_claim("ns", "w", "c", "n1", **kw)
    pod["metadata"]["uid"] = "uid-w"
    return pod


def test_every_container_naming_the_claim_holds_its_shares() -> None:
    pod = _pod(containers=("a", "b"), app_class="offline")
    pod["spec"]["containers"].append({"name": "sidecar"})
    pod["spec"]["initContainers"] = [{"name": "warm", "resources": {"claims": [{"name": "gpu", "request": "gpu"}]}}]
    records = consumers(REF, DEVICES, [pod], PoolPolicy(sharing="fixed-share"))
    assert [(r.container, r.shares, r.app_class, r.policy.sharing) for r in records] == [
        ("warm", (DEVICES[0].share,), AppClass.OFFLINE, "fixed-share"),
        ("a", (DEVICES[0].share,), AppClass.OFFLINE, "fixed-share"),
        ("b", (DEVICES[0].share,), AppClass.OFFLINE, "fixed-share"),
    ]
    assert {r.pod_uid for r in records} == {"uid-w"}


def test_a_claim_from_a_template_is_found_through_the_pods_status() -> None:
    pod = _pod()
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]
    assert consumers(REF, DEVICES, [pod], PoolPolicy()) == []  # not generated yet
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "c"}]
    assert [r.container for r in consumers(REF, DEVICES, [pod], PoolPolicy())] == ["main"]


def test_pods_of_other_claims_hold_nothing() -> None:
    assert consumers(REF, DEVICES, [pod_using_claim("ns", "x", "other-claim", "n1")], PoolPolicy()) == []
