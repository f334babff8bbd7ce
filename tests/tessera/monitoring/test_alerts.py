"""Alert rules under the real promtool: they parse, and each fires on its input series and stays
quiet on the others (`promtool test rules`)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from alert_cases import CASES, Case
from promtool_helpers import check_rules, run, write_rules

from tessera.monitoring.alerts import Thresholds, alert_groups, all_alerts
from tessera.monitoring.catalog import known_series
from tessera.monitoring.promql import metric_names

ROOT = Path(__file__).resolve().parents[3]
GROUPS = alert_groups(Thresholds(), tessera=True, dcgm=True)
RULES = {r["alert"]: r for g in GROUPS for r in g["rules"]}
_TEMPLATE = re.compile(r"\{\{ \$labels\.([A-Za-z_][A-Za-z0-9_]*) \}\}")


def _render(text: str, labels: dict[str, str]) -> str:
    """What Prometheus's template engine makes of `{{ $labels.x }}` (the only template we use)."""
    return _TEMPLATE.sub(lambda m: labels.get(m.group(1), ""), text)


def _expected(case: Case) -> list[dict[str, Any]]:
    rule = RULES[case.alert]
    out = []
    for labels in case.fires:
        full = {**labels, **rule["labels"]}
        out.append({"exp_labels": full, "exp_annotations": {k: _render(v, {**labels, **rule["labels"]}) for k, v in rule["annotations"].items()}})
    return out


def _unit_test(case: Case) -> dict[str, Any]:
    return {
        "name": f"{case.alert}: {case.name}",
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
        "alert_rule_test": [{"eval_time": case.eval_time, "alertname": case.alert, "exp_alerts": _expected(case)}],
    }


def test_rules_pass_promtool_check(tmp_path: Path) -> None:
    result = check_rules(write_rules(tmp_path / "rules.yaml", GROUPS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in result.stdout


def test_every_alert_fires_on_its_series_and_not_on_the_others(tmp_path: Path) -> None:
    write_rules(tmp_path / "rules.yaml", GROUPS)
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [_unit_test(c) for c in CASES]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_wrong_expectation_makes_promtool_fail(tmp_path: Path) -> None:
    """The harness can fail: a case claiming a healthy GPU fires is refused."""
    write_rules(tmp_path / "rules.yaml", GROUPS)
    wrong = Case("TesseraGpuUnhealthy", "wrong", {'tessera_gpu_healthy{gpu_uuid="GPU-1"}': "1x10"}, "5m", ({"gpu_uuid": "GPU-1"},))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [_unit_test(wrong)]}))
    result = run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    for name in RULES:
        cases = [c for c in CASES if c.alert == name]
        assert any(c.fires for c in cases), f"{name}: no series that make it fire"
        assert any(not c.fires for c in cases), f"{name}: no series that must not make it fire"
    assert {c.alert for c in CASES} <= set(RULES)


@pytest.mark.parametrize("alert", all_alerts(), ids=lambda a: a.name)
def test_every_alert_reads_exported_metrics_and_has_its_annotations(alert: Any) -> None:
    assert metric_names(alert.expr) <= known_series()
    rule = RULES[alert.name]
    assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
    assert rule["labels"]["severity"] in ("critical", "warning")
    # annotations use only {{ $labels.x }} templates (the tests render them without Go)
    for text in rule["annotations"].values():
        assert "{{" not in _TEMPLATE.sub("", text)


def test_every_runbook_url_points_at_a_section_of_docs_runbooks() -> None:
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-") for line in runbooks.splitlines() if line.startswith("## ")}
    for name, rule in RULES.items():
        url = rule["annotations"]["runbook_url"]
        assert url == f"{Thresholds().runbook_url}#{name.lower()}"
        assert name.lower() in anchors, f"docs/runbooks.md has no section '## {name}'"


@pytest.mark.parametrize(
    ("thresholds", "alert", "fragment"),
    [
        (Thresholds(pool_allocation_percent=75), "TesseraPoolAllocationHigh", "> 0.75"),
        (Thresholds(stranded_share_percent=12.5), "TesseraPoolStrandedHigh", "> 0.125"),
        (Thresholds(extender_p99_seconds=0.25), "TesseraExtenderSlow", "> 0.25"),
        (Thresholds(extender_error_percent=5), "TesseraExtenderErrors", "> 0.05"),
    ],
)
def test_thresholds_from_the_stack_reach_the_rules(thresholds: Thresholds, alert: str, fragment: str) -> None:
    rules = {r["alert"]: r for g in alert_groups(thresholds, tessera=True, dcgm=False) for r in g["rules"]}
    assert rules[alert]["expr"].endswith(fragment)


def test_offline_pause_duration_from_the_stack_is_the_rules_for() -> None:
    rules = {r["alert"]: r for g in alert_groups(Thresholds(offline_paused_minutes=45), tessera=True, dcgm=False) for r in g["rules"]}
    assert rules["TesseraOfflinePausedTooLong"]["for"] == "45m"
