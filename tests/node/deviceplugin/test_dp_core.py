"""Pure core: token IDs, the Allocate answer and the preferred allocation."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.model.contract import ALLOCATION_ENV_KEYS, NodeGpu
from tessera_node.deviceplugin.core import (
    AllocateSettings,
    Health,
    Inventory,
    TokenError,
    allocate_container,
    preferred_tokens,
    token_gpu,
    token_id,
)

INVENTORY = Inventory.of(NodeGpu(i, f"GPU-{i}", "H100-80GB", 81559) for i in range(4))


@pytest.mark.parametrize(("token", "gpu"), [("gpu0-core000", 0), ("gpu3-core042", 3), ("gpu12-core099", 12)])
def test_token_ids_name_their_gpu(token: str, gpu: int) -> None:
    assert token_gpu(token) == gpu


@pytest.mark.parametrize("token", ["gpu0-core100", "GPU-abc", "gpu1-core42", "gpu-core001", ""])
def test_foreign_device_ids_are_rejected(token: str) -> None:
    with pytest.raises(TokenError):
        token_gpu(token)


def test_health_applies_to_exactly_one_gpus_100_tokens() -> None:
    devices = INVENTORY.with_health({2: False}).devices()
    unhealthy = {t for t, h in devices if h is Health.UNHEALTHY}
    assert unhealthy == {token_id(2, n) for n in range(100)}
    assert len(devices) == 400
    assert INVENTORY.with_health({2: False}).healthy_memory_mib == 3 * 81559


@pytest.mark.parametrize(
    ("settings", "mounts"),
    [
        (AllocateSettings(uses_mps=False), ()),
        (AllocateSettings(uses_mps=True), (("/run/tessera/mps", "/run/tessera/mps"),)),
        (AllocateSettings(uses_mps=True, mps_shm_host_dir="/run/tessera/mps/shm"), (("/run/tessera/mps", "/run/tessera/mps"), ("/dev/shm", "/run/tessera/mps/shm"))),
    ],
)
def test_allocate_gives_node_wide_mounts_and_never_an_allocation_configmap_key(settings: AllocateSettings, mounts: tuple[tuple[str, str], ...]) -> None:
    answer = allocate_container(INVENTORY, [token_id(1, 5), token_id(3, 7)], settings)
    assert tuple((m.container_path, m.host_path) for m in answer.mounts) == mounts
    assert not set(answer.envs) & set(ALLOCATION_ENV_KEYS)


def test_allocate_rejects_tokens_of_a_gpu_the_node_does_not_have() -> None:
    with pytest.raises(TokenError, match="GPU 7"):
        allocate_container(INVENTORY, [token_id(7, 1)], AllocateSettings())


@pytest.mark.parametrize(
    ("free", "size", "gpus"),
    [
        ({0: 100, 1: 100}, 30, {0}),  # fits one GPU: take one
        ({0: 40, 1: 100}, 30, {0}),  # best fit: the fuller GPU, keep the idle one whole
        ({0: 20, 1: 100}, 30, {1}),  # does not fit GPU 0
        ({0: 100, 1: 100, 2: 50}, 200, {0, 1}),  # two whole GPUs
    ],
)
def test_preferred_allocation_keeps_a_share_on_one_gpu(free: dict[int, int], size: int, gpus: set[int]) -> None:
    available = [token_id(g, n) for g, count in free.items() for n in range(100 - count, 100)]
    chosen = preferred_tokens(available, [], size)
    assert {token_gpu(t) for t in chosen} == gpus
    assert len(chosen) == size


@given(
    free=st.dictionaries(st.integers(0, 7), st.integers(1, 100), min_size=1, max_size=8),
    data=st.data(),
)
def test_preferred_allocation_is_always_a_valid_answer(free: dict[int, int], data: st.DataObject) -> None:
    available = [token_id(g, n) for g, count in free.items() for n in range(count)]
    size = data.draw(st.integers(1, len(available)))
    must = data.draw(st.lists(st.sampled_from(available), max_size=min(size, 3), unique=True))
    chosen = preferred_tokens(available, must, size)
    assert len(chosen) == size == len(set(chosen))
    assert set(chosen) <= set(available)
    assert set(must) <= set(chosen)
