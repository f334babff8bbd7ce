"""Re-partitioning: which labels a layout sets, which layout is active, and the relabel rollout
against the in-memory Kubernetes API (with a simulated mig-manager); the CLI as a process."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.model import contract
from tessera.kube.fake import FakeKubeApi
from tessera.repartition import (
    LABEL_MIG_CONFIG_STATE,
    PoolPlan,
    RolloutSettings,
    ScheduledLayout,
    active_layout,
    apply_layout,
    layout_config_name,
    layout_labels,
    load_plan,
    plan_document,
)

SHANGHAI = dt.timezone(dt.timedelta(hours=8))


def _plan(kind: contract.PoolKind, pool: str, layouts: list[tuple[str, int | str]], tz: str = "Asia/Shanghai") -> PoolPlan:
    return PoolPlan(
        pool,
        kind,
        tuple(ScheduledLayout(i, cron, tz, layout_labels(kind, pool, i, layout), name=None) for i, (cron, layout) in enumerate(layouts)),
    )


SHARED = _plan("shared", "frac", [("0 8 * * 1-5", 4), ("0 20 * * 1-5", 1)])
MIG = _plan("mig", "infer", [("0 8 * * *", "all-1g.5gb"), ("0 20 * * *", "all-7g.40gb")])


@pytest.mark.parametrize(
    ("kind", "layout", "expected"),
    [
        ("shared", 4, {contract.LABEL_MAX_SHARES_PER_GPU: "4"}),
        ("timeslice", 2, {contract.LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG: "tessera-p.1"}),
        ("mig", "all-1g.5gb", {contract.LABEL_NVIDIA_MIG_CONFIG: "tessera-p.1", contract.LABEL_NVIDIA_DEVICE_PLUGIN_CONFIG: "tessera-p.1"}),
    ],
)
def test_layout_labels_per_pool_kind(kind: contract.PoolKind, layout: int | str, expected: dict[str, str]) -> None:
    assert layout_labels(kind, "p", 1, layout) == {contract.LABEL_LAYOUT: "1", **expected}


@pytest.mark.parametrize(("kind", "layout"), [("nvidia", 1), ("shared", "all-1g.5gb")])
def test_layouts_that_cannot_be_applied_are_refused(kind: contract.PoolKind, layout: int | str) -> None:
    with pytest.raises(ValueError):
        layout_labels(kind, "p", 0, layout)


def test_layout_names_never_collide_and_fit_a_label() -> None:
    assert layout_config_name("a", 1) != contract.mig_config_name("a-1")
    with pytest.raises(ValueError, match="63"):
        layout_config_name("x" * 60, 0)


@pytest.mark.parametrize(
    ("local_time", "expected"),
    [
        (dt.datetime(2026, 11, 18, 10, 0), 0),  # Wednesday morning: day layout
        (dt.datetime(2026, 11, 18, 20, 0), 1),  # the minute the night entry fires
        (dt.datetime(2026, 11, 18, 7, 59), 1),  # before 08:00: still last night's layout
        (dt.datetime(2026, 11, 23, 7, 0), 1),  # Monday 07:00: Friday night's layout held the weekend
        (dt.datetime(2026, 11, 22, 12, 0), 1),  # Sunday noon: weekdays-only day layout did not fire
    ],
)
def test_active_layout_follows_the_schedule_in_its_time_zone(local_time: dt.datetime, expected: int) -> None:
    now = local_time.replace(tzinfo=SHANGHAI).astimezone(dt.timezone.utc)
    active = active_layout(SHARED, now)
    assert active is not None and active.index == expected


@settings(max_examples=40, deadline=None)
@given(
    day=st.integers(min_value=0, max_value=22),
    length=st.integers(min_value=1, max_value=23),
    moment=st.datetimes(min_value=dt.datetime(2026, 1, 1), max_value=dt.datetime(2027, 12, 31)),
)
def test_daily_two_entry_schedule_is_day_exactly_between_the_two_hours(day: int, length: int, moment: dt.datetime) -> None:
    night = min(day + length, 23)
    if night == day:
        return
    plan = _plan("shared", "p", [(f"0 {day} * * *", 4), (f"0 {night} * * *", 1)], tz="UTC")
    active = active_layout(plan, moment.replace(tzinfo=dt.timezone.utc))
    assert active is not None
    assert (active.index == 0) == (day <= moment.hour < night)


def test_plan_document_round_trips() -> None:
    assert load_plan(plan_document([MIG, SHARED]), "frac") == SHARED


class FakeTime:
    """A clock that only moves when the code under test sleeps; `on_sleep` simulates the cluster."""

    def __init__(self, on_sleep: Callable[[], None] = lambda: None) -> None:
        self.now = 0.0
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.on_sleep()


def _cluster(*nodes: tuple[str, str, dict[str, str]]) -> FakeKubeApi:
    api = FakeKubeApi()
    for name, pool, labels in nodes:
        api.create_node({"metadata": {"name": name, "labels": {contract.LABEL_POOL: pool, **labels}}})
    return api


def _labels(api: FakeKubeApi, node: str) -> dict[str, str]:
    labels: dict[str, str] = api.get_node(node)["metadata"]["labels"]
    return labels


def _gpu_pod(api: FakeKubeApi, name: str, node: str, resource: str = "nvidia.com/mig-1g.5gb") -> None:
    api.create_pod(
        {"metadata": {"name": name, "namespace": "ml"}, "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}]}, "status": {"phase": "Running"}}
    )


def test_shared_pool_switch_relabels_its_nodes_only_and_is_idempotent() -> None:
    api = _cluster(("s1", "frac", {}), ("s2", "frac", {}), ("other", "infer", {}))
    time = FakeTime()
    report = apply_layout(api, SHARED, 1, clock=time.clock, sleep=time.sleep)
    assert (report.changed, report.failed) == (["s1", "s2"], {})
    assert _labels(api, "s1")[contract.LABEL_MAX_SHARES_PER_GPU] == "1"
    assert contract.LABEL_LAYOUT not in _labels(api, "other")
    again = apply_layout(api, SHARED, 1, clock=time.clock, sleep=time.sleep)
    assert (again.changed, again.unchanged) == ([], ["s1", "s2"])


def test_dry_run_changes_nothing() -> None:
    api = _cluster(("s1", "frac", {}))
    time = FakeTime()
    report = apply_layout(api, SHARED, 0, clock=time.clock, sleep=time.sleep, dry_run=True)
    assert report.changed == ["s1"]
    assert contract.LABEL_LAYOUT not in _labels(api, "s1")


def _mig_manager(api: FakeKubeApi, log: list[tuple[str, str]], outcome: str = "success") -> Callable[[], None]:
    """Each tick: every node marked pending is reconfigured; record which nodes were still pending."""

    def tick() -> None:
        pending = [n["metadata"]["name"] for n in api.list_nodes() if n["metadata"]["labels"].get(LABEL_MIG_CONFIG_STATE) == "pending"]
        if len(pending) > 1:
            log.append(("pending-together", ",".join(sorted(pending))))
        for name in pending:
            api.patch_node_labels(name, {LABEL_MIG_CONFIG_STATE: outcome})
            log.append((outcome, name))

    return tick


def test_mig_pool_waits_for_gpu_pods_then_switches_one_node_at_a_time() -> None:
    api = _cluster(*((f"m{i}", "infer", {LABEL_MIG_CONFIG_STATE: "success"}) for i in range(3)))
    _gpu_pod(api, "infer-0", "m0")
    log: list[tuple[str, str]] = []
    mig_manager = _mig_manager(api, log)
    ticks = {"n": 0}

    def on_sleep() -> None:
        ticks["n"] += 1
        if ticks["n"] == 3:  # the GPU pod on m0 finishes after a few polls
            api.set_pod_phase("ml", "infer-0", "Succeeded")
        mig_manager()

    time = FakeTime(on_sleep)
    report = apply_layout(api, MIG, 1, clock=time.clock, sleep=time.sleep, settings=RolloutSettings(poll_interval_s=10))
    assert report.ok and report.changed == ["m0", "m1", "m2"]
    assert [name for outcome, name in log if outcome == "success"] == ["m0", "m1", "m2"]
    assert not any(kind == "pending-together" for kind, _ in log)  # never two nodes down at once
    assert _labels(api, "m2")[contract.LABEL_NVIDIA_MIG_CONFIG] == "tessera-infer.1"


def test_mig_failure_stops_the_rollout_and_says_where_to_look() -> None:
    api = _cluster(("m0", "infer", {}), ("m1", "infer", {}))
    time = FakeTime(_mig_manager(api, [], outcome="failed"))
    report = apply_layout(api, MIG, 0, clock=time.clock, sleep=time.sleep)
    assert list(report.failed) == ["m0"] and "mig-manager" in report.failed["m0"]
    assert contract.LABEL_LAYOUT not in _labels(api, "m1")


def test_busy_node_is_skipped_after_the_idle_timeout_and_the_rest_proceed() -> None:
    api = _cluster(("m0", "infer", {}), ("m1", "infer", {}))
    _gpu_pod(api, "stuck", "m0")
    time = FakeTime(_mig_manager(api, []))
    report = apply_layout(api, MIG, 0, clock=time.clock, sleep=time.sleep, settings=RolloutSettings(idle_timeout_s=60, poll_interval_s=10))
    assert "ml/stuck" in report.failed["m0"]
    assert report.changed == ["m1"]
    assert contract.LABEL_NVIDIA_MIG_CONFIG not in _labels(api, "m0")


def test_new_nodes_only_leaves_switched_nodes_alone() -> None:
    api = _cluster(("old", "frac", {contract.LABEL_LAYOUT: "0", contract.LABEL_MAX_SHARES_PER_GPU: "4"}), ("new", "frac", {}))
    time = FakeTime()
    report = apply_layout(api, SHARED, 1, clock=time.clock, sleep=time.sleep, new_nodes_only=True)
    assert report.changed == ["new"]
    assert _labels(api, "old")[contract.LABEL_MAX_SHARES_PER_GPU] == "4"


CLI = [sys.executable, "-m", "tessera.cli.main", "repartition"]


@pytest.fixture()
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(plan_document([SHARED, MIG]))
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["apply", "--pool", "frac", "--layout-index", "0", "--plan", "/nonexistent/plan.json"], "cannot read plan"),
        (["apply", "--pool", "frac", "--layout-index", "7", "--plan", "{plan}"], "has no layout 7"),
        (["apply", "--pool", "frac", "--plan", "{plan}"], "--layout-index"),
        (["reconcile", "--plan", "{plan}"], "--pool"),
    ],
    ids=["missing-plan", "unknown-layout", "missing-index", "missing-pool"],
)
def test_cli_reports_user_mistakes(plan_file: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tessera.cli.main import main

    argv = [a.replace("{plan}", str(plan_file)) for a in args]
    try:
        code = main(["repartition", *argv])
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_process_names_the_scheduled_pools_for_an_unknown_pool(plan_file: Path) -> None:
    result = subprocess.run(
        [*CLI, "apply", "--pool", "nope", "--layout-index", "0", "--plan", str(plan_file)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "scheduled pools: frac, infer" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_node_left_failed_by_an_earlier_run_keeps_the_job_failing() -> None:
    labels = {**MIG.layout(0).labels, LABEL_MIG_CONFIG_STATE: "failed"}
    api = _cluster(("m0", "infer", labels))
    time = FakeTime()
    report = apply_layout(api, MIG, 0, clock=time.clock, sleep=time.sleep)
    assert not report.ok and "earlier" in report.failed["m0"]
