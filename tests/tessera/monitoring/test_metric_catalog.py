"""The metric names we export are a stable, documented interface; the dcgm-exporter list matches
the gpu-operator version the stacks pin."""
from __future__ import annotations

import re
from pathlib import Path

from tessera.model.platform import GpuOperatorConfig
from tessera.monitoring import dcgm_counters
from tessera.monitoring.catalog import metrics_table, tessera_metrics, tessera_series

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "monitoring.md"


def _doc_table() -> str:
    text = DOC.read_text()
    match = re.search(r"<!-- metrics-table:begin -->\n(.*?)\n<!-- metrics-table:end -->", text, re.S)
    assert match, "docs/monitoring.md lost its metric table markers"
    return match.group(1).strip() + "\n"


def test_docs_list_exactly_the_metrics_the_code_declares() -> None:
    """Regenerate with `python -m tessera.monitoring.catalog` after a deliberate change."""
    assert _doc_table() == metrics_table()


def test_metric_names_are_unique_and_follow_prometheus_conventions() -> None:
    names = [spec.name for _, spec in tessera_metrics()]
    assert len(names) == len(set(names))
    assert len(tessera_series()) == sum(len(spec.series_names()) for _, spec in tessera_metrics())
    for _, spec in tessera_metrics():
        assert re.fullmatch(r"tessera_[a-z0-9_]+", spec.name), spec.name
        assert not spec.name.endswith("_total"), f"{spec.name}: counters are declared without _total"
        assert spec.help and (spec.help[0].isupper() or spec.help[0].isdigit()), spec.name
        assert "|" not in spec.help, f"{spec.name}: the help text goes into a Markdown table"


def test_dcgm_list_is_for_the_gpu_operator_the_stacks_pin() -> None:
    assert GpuOperatorConfig().chart_version == dcgm_counters.GPU_OPERATOR_CHART_VERSION, (
        "gpuOperator.chartVersion moved: re-read dcgm-exporter's counters at the image that chart pins and update dcgm_counters.py"
    )
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"} <= dcgm_counters.exported_everywhere()
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" not in dcgm_counters.exported_everywhere()  # only in dcp-metrics-included.csv
