"""Health state machine: which Xids take a GPU out of service, and when it comes back."""
from __future__ import annotations

import pytest

from tessera_node.gpu.health import HealthSettings, HealthTracker
from tessera_node.gpu.backend import GpuIndex, XidEvent

QUIET = 60.0


def _tracker() -> HealthTracker:
    return HealthTracker(HealthSettings(recovery_quiet_s=QUIET), [0, 1])


@pytest.mark.parametrize(("xid", "healthy"), [(13, True), (31, True), (43, True), (45, True), (68, True), (109, True), (48, False), (63, False), (64, False), (74, False), (79, False), (94, False), (95, False)])
def test_application_xids_keep_the_gpu_and_others_take_it_out(xid: int, healthy: bool) -> None:
    tracker = _tracker()
    changed = tracker.on_xids([XidEvent(GpuIndex(1), xid)], now=0.0)
    assert tracker.healthy(1) is healthy
    assert changed == (set() if healthy else {1})
    assert tracker.healthy(0)


@pytest.mark.parametrize(
    ("responsive", "elapsed", "healthy"),
    [(True, QUIET - 1, False), (True, QUIET, True), (False, QUIET * 10, False)],
    ids=["still quiet period", "quiet and answering", "fell off the bus"],
)
def test_recovery_needs_a_quiet_period_and_an_answering_gpu(responsive: bool, elapsed: float, healthy: bool) -> None:
    tracker = _tracker()
    tracker.on_xids([XidEvent(GpuIndex(0), 48)], now=0.0)
    tracker.on_probe(lambda g: responsive or g != 0, now=elapsed)
    assert tracker.healthy(0) is healthy


def test_an_unresponsive_gpu_is_unhealthy_without_any_xid() -> None:
    tracker = _tracker()
    assert tracker.on_probe(lambda g: g != 1, now=0.0) == {1}
    assert "NVML" in tracker.reason(1)


def test_an_xid_nvml_cannot_attribute_marks_every_gpu() -> None:
    tracker = _tracker()
    tracker.on_xids([XidEvent(GpuIndex(-1), 79)], now=0.0)
    assert tracker.health() == {0: False, 1: False}
