"""The slice lists its devices in the order that makes kube-scheduler's first fit follow the
pool's `placement`: fullest GPU first for binpack, emptiest first for spread, by the claims the
plugin has prepared. Driven through the real sockets by the kubelet 1.36 emulator; the slice is
read from the API server as kube-scheduler reads it."""
from __future__ import annotations

import pytest
from dra_harness import NODE, DraNode, Grant, wait_until

from tessera.model.contract import LABEL_GPU_PLACEMENT


def _order(node: DraNode) -> tuple[list[str], int]:
    (slice_,) = node.slices()
    return [d["name"] for d in slice_["spec"]["devices"]], int(slice_["spec"]["pool"]["generation"])


def _becomes(node: DraNode, order: list[str]) -> int:
    """The slice's generation once it lists `order`."""
    assert wait_until(lambda: _order(node)[0] == order), f"slice devices {_order(node)[0]}, wanted {order}"
    return _order(node)[1]


@pytest.mark.parametrize(
    ("placement", "after_two", "after_release"),
    [
        # gpu-2 holds 30, then gpu-1 70: binpack lists the fullest first, spread the emptiest
        ("binpack", ["gpu-1", "gpu-2", "gpu-0"], ["gpu-2", "gpu-0", "gpu-1"]),
        ("spread", ["gpu-0", "gpu-2", "gpu-1"], ["gpu-0", "gpu-1", "gpu-2"]),
    ],
)
def test_the_slice_follows_prepared_claims_in_the_pools_placement_order(placement: str, after_two: list[str], after_release: list[str]) -> None:
    node = DraNode(spec="T4:3", sharing="best-effort")
    try:
        node.kube.patch_node_labels(NODE, {LABEL_GPU_PLACEMENT: placement})
        node.start_plugin()
        node.start_kubelet()
        first = _becomes(node, ["gpu-0", "gpu-1", "gpu-2"])
        small = node.claim("small", [Grant(NODE, 2, 30, 2048)], pod="a")
        big = node.claim("big", [Grant(NODE, 1, 70, 4096)], pod="b")
        assert node.prepare(small)[small[2]].error == ""
        assert node.prepare(big)[big[2]].error == ""
        second = _becomes(node, after_two)
        assert second > first, "a new device order is a new pool generation (the scheduler drops the old slice)"
        assert node.kubelet.node_unprepare([big]) == {big[2]: ""}
        assert _becomes(node, after_release) > second
    finally:
        node.close()
