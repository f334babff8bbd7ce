"""Pool settings over real HTTP: max shares per GPU, the pools file (placement, sharesPerGpu,
policy) winning over stale labels and applying without a restart, and MPS keys only where MPS runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from extender_harness import GIB, Harness, node_manifest, pod_manifest
from kube_scheduler_emulator import KubeSchedulerEmulator

from tessera.model.contract import ANNOTATION_ALLOCATION, LABEL_MAX_SHARES_PER_GPU, LABEL_POOL, LABEL_SHARING_POLICY, Allocation
from tessera.kube.fake import FakeKubeApi
from tessera.model.allocation_record import MPS_ENV_KEYS

POOL = "t4-shared"


def _gpu(harness: Harness, name: str) -> int:
    text = harness.api.get_pod("default", name)["metadata"]["annotations"][ANNOTATION_ALLOCATION]
    return Allocation.from_json(text).containers["main"][0].index


def _run(harness: Harness, scheduler: KubeSchedulerEmulator, name: str, core: int = 10) -> str | None:
    harness.api.create_pod(pod_manifest(name, ("main", core, None)))
    return scheduler.schedule("default", name).node


@pytest.fixture
def pools(tmp_path: Path) -> Path:
    return tmp_path / "pools.json"


def _write(path: Path, **settings: object) -> None:
    path.write_text(json.dumps({POOL: {"policy": "best-effort", "placement": "binpack", **settings}}))


def test_max_shares_label_gives_each_pod_its_own_gpu(harness: Harness) -> None:
    harness.api.create_node(node_manifest("n1", gpus=2, placement="binpack", labels={LABEL_MAX_SHARES_PER_GPU: "1"}))
    scheduler = harness.scheduler(harness.start())
    assert _run(harness, scheduler, "a") == _run(harness, scheduler, "b") == "n1"
    assert {_gpu(harness, "a"), _gpu(harness, "b")} == {0, 1}, "binpack would have stacked them; the cap wins"
    assert _run(harness, scheduler, "c") is None, "both GPUs hold their one share"
    assert _run(harness, scheduler, "whole", core=100) is None, "no GPU is idle either"


def test_pools_file_placement_wins_over_the_label_and_an_edit_applies_live(harness: Harness, pools: Path) -> None:
    _write(pools, placement="spread")
    harness.pools_file = pools
    harness.api.create_node(node_manifest("n1", gpus=2, placement="binpack", labels={LABEL_POOL: POOL}))
    scheduler = harness.scheduler(harness.start())
    assert _run(harness, scheduler, "s1") == _run(harness, scheduler, "s2") == "n1"
    assert _gpu(harness, "s1") != _gpu(harness, "s2"), "spread from the pools file"
    _write(pools, placement="binpack")  # same pod shape: cached answers must not survive the edit
    assert _run(harness, scheduler, "b1") == _run(harness, scheduler, "b2") == "n1"
    assert _gpu(harness, "b1") == _gpu(harness, "b2"), "binpack after the edit, no restart"


def test_pools_file_shares_per_gpu_caps_a_pool_without_the_label(harness: Harness, pools: Path) -> None:
    _write(pools, sharesPerGpu=2)
    harness.pools_file = pools
    harness.api.create_node(node_manifest("n1", gpus=1, labels={LABEL_POOL: POOL}))
    scheduler = harness.scheduler(harness.start())
    assert [_run(harness, scheduler, f"p{i}") for i in range(3)] == ["n1", "n1", None], "at most 2 pods per GPU"


@pytest.mark.parametrize(
    ("label", "file_policy", "mps"),
    [
        ("fixed-share", None, True),
        ("best-effort", None, False),
        ("burst-share", None, False),
        (None, None, False),  # no policy anywhere: best-effort, as the node agent assumes
        ("best-effort", "fixed-share", True),  # the pools file edit wins over the stale label
        ("fixed-share", "burst-share", False),
    ],
)
def test_mps_keys_only_for_fixed_share_pools(tmp_path: Path, label: str | None, file_policy: str | None, mps: bool) -> None:
    pools = tmp_path / "pools.json"
    pools.write_text(json.dumps({POOL: {"policy": file_policy}} if file_policy else {}))
    harness = Harness(FakeKubeApi(), pools_file=pools)
    try:
        labels = {LABEL_POOL: POOL, **({LABEL_SHARING_POLICY: label} if label else {})}
        harness.api.create_node(node_manifest("n1", gpus=1, labels=labels))
        scheduler = harness.scheduler(harness.start())
        harness.api.create_pod(pod_manifest("job", ("main", 30, 4 * GIB)))
        assert scheduler.schedule("default", "job").node == "n1"
        name = harness.api.get_pod("default", "job")["metadata"]["annotations"]["tessera.dev/allocation-configmap"]
        data = harness.api.get_configmap("default", name)["data"]
        assert data["main.TESSERA_GPU_MEMORY_MIB"] == str(4 * GIB) and data["main.NVIDIA_VISIBLE_DEVICES"] == "GPU-n1-0"
        assert all((f"main.{key}" in data) is mps for key in MPS_ENV_KEYS), sorted(data)
    finally:
        harness.close()


def test_a_re_partitioned_pools_label_caps_shares_until_the_file_states_a_cap(harness: Harness, pools: Path) -> None:
    _write(pools)  # re-partitioned pools: the file leaves sharesPerGpu to the layout's label
    harness.pools_file = pools
    harness.api.create_node(node_manifest("n1", gpus=1, labels={LABEL_POOL: POOL, LABEL_MAX_SHARES_PER_GPU: "1"}))
    scheduler = harness.scheduler(harness.start())
    assert [_run(harness, scheduler, f"night{i}") for i in range(2)] == ["n1", None], "the night layout's label: one share per GPU"
    _write(pools, sharesPerGpu=3)  # the schedule was removed from stack config: the file states the cap
    assert [_run(harness, scheduler, f"day{i}") for i in range(3)] == ["n1", "n1", None], "3 per GPU, the stale label ignored"
