"""Figures and report shape of the GPU checks (gpucheck.analysis): pure functions, no GPU."""
from __future__ import annotations

import math

import gpucheck_paths  # noqa: F401 - puts node-agent/gpu-checks on sys.path
import pytest
from gpucheck.analysis import (
    BESTEFFORT_RATIO,
    CHECK_ORDER,
    KEPT_FRACTION,
    MPS_RATIO,
    OVERHEAD_PCT,
    check_result,
    count_between,
    exit_code,
    match_pids_by_memory,
    on_windows,
    overhead_pct,
    parse_only,
    parse_pattern,
    parse_pids,
    percentile,
    rate_in_window,
    rate_in_windows,
    ratio,
    reaction,
    skipped,
    state_at,
    steady_rate,
    summary_lines,
)


@pytest.mark.parametrize(
    ("target", "value", "met"),
    [
        (MPS_RATIO, 2.0, True), (MPS_RATIO, 1.8, True), (MPS_RATIO, 2.2, True), (MPS_RATIO, 1.79, False), (MPS_RATIO, 2.21, False),
        (BESTEFFORT_RATIO, 1.1, True), (BESTEFFORT_RATIO, 1.11, False),
        (OVERHEAD_PCT, 3.99, True), (OVERHEAD_PCT, 4.01, False), (OVERHEAD_PCT, -2.0, True),
        (KEPT_FRACTION, 0.95, True), (KEPT_FRACTION, 0.949, False),
        (MPS_RATIO, None, None), (KEPT_FRACTION, math.nan, None),
    ],
)
def test_targets_are_the_promised_figures(target, value, met) -> None:
    assert target.met(value) is met


def test_rates_count_batches_in_the_window_and_steady_rate_has_no_edge_bias() -> None:
    batches = [0.1 * i for i in range(1, 101)]  # a batch every 100 ms for 10 s
    assert count_between(batches, 1.0, 2.0) == 10  # (1.0, 2.0]: 1.1 .. 2.0
    assert rate_in_window(batches, 0.0, 10.0, per_batch=8) == pytest.approx(80.0)
    # a window edge cutting batches does not bias the steady rate
    assert steady_rate(batches, 0.55, 5.55, per_batch=8) == pytest.approx(80.0)
    assert steady_rate([1.0], 0.0, 5.0, per_batch=8) is None
    with pytest.raises(ValueError):
        rate_in_window(batches, 2.0, 2.0, 8)


def test_a_frozen_stretch_counts_as_time_in_the_wall_clock_rate() -> None:
    running = [0.1 * i for i in range(1, 51)]  # 5 s of work, then frozen for 5 s
    assert rate_in_window(running, 0.0, 10.0, per_batch=1) == pytest.approx(5.0)
    assert steady_rate(running, 0.0, 10.0, per_batch=1) == pytest.approx(10.0)


def test_on_windows_follow_the_burst_pattern() -> None:
    assert on_windows(100.0, 6.0, 4.0, 130.0) == [(100.0, 106.0), (110.0, 116.0), (120.0, 126.0)]
    assert on_windows(0.0, 6.0, 4.0, 13.0) == [(0.0, 6.0), (10.0, 13.0)]  # the last one is cut at the end
    with pytest.raises(ValueError):
        on_windows(0.0, 0.0, 1.0, 10.0)


def test_burst_rate_counts_only_active_phases() -> None:
    # 2 s on / 2 s off; 10 batches per second while on, none while off
    batches = [t + 0.1 * i for t in (0.0, 4.0) for i in range(1, 21)]
    windows = on_windows(0.0, 2.0, 2.0, 8.0)
    assert rate_in_windows(batches, windows, per_batch=1) == pytest.approx(10.0)
    assert rate_in_windows(batches[:20], windows, per_batch=1) == pytest.approx(5.0)  # second burst starved


def test_ratio_and_overhead() -> None:
    assert ratio(6.0, 3.0) == 2.0
    assert ratio(1.0, 0.0) is None and ratio(None, 1.0) is None
    assert overhead_pct(100.0, 97.0) == pytest.approx(3.0)
    assert overhead_pct(100.0, 101.0) == pytest.approx(-1.0)
    assert overhead_pct(None, 1.0) is None


def test_reaction_measures_each_trigger_and_separates_already_and_missed() -> None:
    freezes = [(10.2, True), (13.0, False), (20.5, True), (22.0, False), (24.0, True), (35.0, False)]
    assert state_at(freezes, 10.1) is False and state_at(freezes, 12.9) is True
    r = reaction([10.0, 20.0, 25.0, 40.0], freezes, True, horizon=3.0)
    # 10 -> 10.2; 20 -> 20.5; at 25 it is already frozen; 40: nothing within 3 s
    assert r.already == 1
    assert r.latencies[0] == pytest.approx(0.2) and r.latencies[1] == pytest.approx(0.5) and r.latencies[2] is None
    summary = r.summary()
    assert summary["missed"] == 1 and summary["n"] == 3 and summary["max_ms"] == 500.0
    thaw = reaction([12.0, 21.0], freezes, False, horizon=5.0)
    assert thaw.latencies == (pytest.approx(1.0), pytest.approx(1.0))


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 95) == 4.0


def test_pids_from_another_namespace_are_matched_by_held_memory() -> None:
    # local pids 10, 11 hold 256 and 512 MiB beyond identical contexts; NVML shows host pids
    assert match_pids_by_memory({10: 256, 11: 512}, {9001: 812, 9000: 556}) == {9000: 10, 9001: 11}
    assert match_pids_by_memory({10: 0}, {777: 500}) == {777: 10}


@pytest.mark.parametrize(
    ("expected", "observed", "message"),
    [
        ({10: 256, 11: 512}, {9000: 556}, "2 workers started but 1"),
        ({10: 256, 11: 300}, {9000: 556, 9001: 600}, "at least min_gap_mib apart"),
        ({10: 256, 11: 512}, {9000: 556, 9001: 570}, "too close"),
    ],
)
def test_pid_matching_refuses_to_guess(expected, observed, message) -> None:
    with pytest.raises(ValueError, match=message):
        match_pids_by_memory(expected, observed)


def test_mps_control_output_is_parsed_to_pids() -> None:
    assert parse_pids("12345\n23456\n") == [12345, 23456]
    assert parse_pids("") == []
    assert parse_pids("Cannot find MPS control daemon process") == []


def test_a_missed_or_missing_figure_turns_ok_into_failed() -> None:
    assert check_result("ok", MPS_RATIO, 2.05)["status"] == "ok"
    missed = check_result("ok", MPS_RATIO, 1.5, extra=1)
    assert missed["status"] == "failed" and missed["met"] is False and missed["extra"] == 1
    assert check_result("ok", MPS_RATIO, None)["status"] == "failed"
    assert check_result("error", MPS_RATIO, None)["status"] == "error"
    with pytest.raises(ValueError):
        check_result("fine")


@pytest.mark.parametrize(
    ("statuses", "code"),
    [
        ([], 2), (["skipped", "skipped"], 2), (["ok", "skipped"], 0), (["ok", "failed"], 1), (["ok", "error"], 1),
    ],
)
def test_exit_codes(statuses, code) -> None:
    assert exit_code({f"c{i}": {"status": s} for i, s in enumerate(statuses)}) == code


def test_summary_has_one_line_per_check_with_value_or_reason() -> None:
    lines = summary_lines({"mps": check_result("ok", MPS_RATIO, 1.97), "burst": skipped("no time"), "memory": {"status": "error", "error": "boom"}})
    assert lines[0].startswith("mps") and "1.97" in lines[0] and "2.0 +- 0.2" in lines[0]
    assert "no time" in lines[1] and "boom" in lines[2]


def test_only_keeps_run_order_and_names_the_known_checks() -> None:
    assert parse_only("burst,mps") == ["mps", "burst"]
    assert parse_only("nvml, colocation") == ["nvml", "colocation"]
    with pytest.raises(ValueError, match="known: " + ", ".join(CHECK_ORDER)):
        parse_only("mps,gpu")


def test_pattern_parsing() -> None:
    assert parse_pattern("6:4") == (6.0, 4.0)
    for bad in ("6", "a:b", "0:4", "6:0"):
        with pytest.raises(ValueError):
            parse_pattern(bad)
