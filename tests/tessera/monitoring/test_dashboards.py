"""Every dashboard query is valid PromQL (real promtool) and reads only metrics that exist."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from promtool_helpers import check_rules, write_rules

from tessera.monitoring import dashboards
from tessera.monitoring.catalog import known_series
from tessera.monitoring.promql import metric_names

QUERIES = dashboards.panel_queries()


def _recording_rules(queries: list[tuple[str, str]]) -> list[dict[str, object]]:
    return [{"name": "tessera-dashboard-queries", "rules": [{"record": f"tessera:panel_query:{i}", "expr": q} for i, (_, q) in enumerate(queries)]}]


def test_every_panel_query_parses_with_promtool(tmp_path: Path) -> None:
    result = check_rules(write_rules(tmp_path / "panels.yaml", _recording_rules(QUERIES)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(QUERIES)} rules found" in result.stdout


def test_promtool_catches_a_broken_query(tmp_path: Path) -> None:
    broken = [("broken", "sum by (pool (tessera_pool_gpu_allocated)")]
    result = check_rules(write_rules(tmp_path / "broken.yaml", _recording_rules(broken)))
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


@pytest.mark.parametrize(("title", "query"), QUERIES, ids=[f"{i}-{t}" for i, (t, _) in enumerate(QUERIES)])
def test_every_metric_a_panel_reads_is_exported(title: str, query: str) -> None:
    names = metric_names(query)
    assert names, f"{title}: no metric found in {query!r}"
    assert names <= known_series(), f"{title}: {sorted(names - known_series())} are exported by neither Tessera nor dcgm-exporter"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (pool, kind) (rate(a_total{code=~"5.."}[5m])) / on (pool) group_left (kind) b', {"a_total", "b"}),
        ('histogram_quantile(0.99, sum by (le) (rate(c_bucket{verb="filter"}[5m]))) > 0.1', {"c_bucket"}),
        ("count(up{job='x'} == 1) or vector(0)", {"up"}),
        ('max(d{label="sum(e)"}) without (instance) unless ignoring (x) f offset 5m', {"d", "f"}),
        ("DCGM_FI_DEV_XID_ERRORS > 0 and changes(DCGM_FI_DEV_XID_ERRORS[10m]) > 0", {"DCGM_FI_DEV_XID_ERRORS"}),
    ],
)
def test_metric_names_are_found_and_nothing_else(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_panels_required_by_the_brief_are_there() -> None:
    titles = [title for _, panels in dashboards.ROWS for title in (p.title for p in panels)]
    for wanted in (
        "GPU allocation per pool", "Allocated share per pool kind", "Stranded share per pool", "Per-container SM use against gpu-core",
        "Per-pod GPU memory against gpu-memory", "Pause events", "Pause latency", "Extender request latency", "Binds and errors",
        "Device plugin registered per node", "GPUs advertised by health", "Xid errors (shared pools)", "Last Xid per GPU (dcgm-exporter)",
        "Extender leader per replica", "Leadership changes", "Allocation records in conflict", "Ambiguous API writes",
    ):
        assert wanted in titles


def test_dashboard_model_has_every_panel_with_its_queries_and_a_datasource_variable() -> None:
    board = dashboards.overview()
    assert board["uid"] == dashboards.UID and board["title"] == dashboards.TITLE
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert [t["expr"] for p in panels for t in p["targets"]] == [q for _, q in QUERIES]
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in panels)
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    # no panel overlaps another on Grafana's 24-column grid
    cells = [(x, y) for p in board["panels"] for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"]) for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])]
    assert len(cells) == len(set(cells)) and all(x < 24 for x, _ in cells)
    json.dumps(board)  # plain JSON, as the ConfigMap carries it
