"""Pool settings per node: the source edited last wins; at start (or for a new node) the pools file."""
from __future__ import annotations

import pytest

from tessera.model.contract import LABEL_GPU_PLACEMENT, LABEL_LAYOUT, LABEL_MAX_SHARES_PER_GPU, LABEL_POOL
from tessera.scheduler.pool_settings import PoolSettings

POOL = "p"
Step = tuple[str, dict[str, object]]  # ("file", {pool setting: value}) or ("labels", {label: value})

# steps in order, then the effective placement / max-shares labels of node "n" in pool "p"
TABLE: list[tuple[str, list[Step], dict[str, str | None]]] = [
    ("labels only", [("labels", {LABEL_GPU_PLACEMENT: "binpack"})], {LABEL_GPU_PLACEMENT: "binpack"}),
    (
        "file beats labels present at start",
        [("file", {"placement": "spread"}), ("labels", {LABEL_GPU_PLACEMENT: "binpack"})],
        {LABEL_GPU_PLACEMENT: "spread"},
    ),
    (
        "a later label edit beats the file (TKE node pool update, label-nodes.sh)",
        [("file", {"placement": "spread"}), ("labels", {LABEL_GPU_PLACEMENT: "spread"}), ("labels", {LABEL_GPU_PLACEMENT: "binpack"})],
        {LABEL_GPU_PLACEMENT: "binpack"},
    ),
    (
        "a later file edit beats the label again",
        [
            ("file", {"placement": "spread"}),
            ("labels", {LABEL_GPU_PLACEMENT: "spread"}),
            ("labels", {LABEL_GPU_PLACEMENT: "binpack"}),
            ("file", {"placement": "spread", "sharesPerGpu": None}),
            ("file", {"placement": "binpack"}),
            ("file", {"placement": "spread"}),
        ],
        {LABEL_GPU_PLACEMENT: "spread"},
    ),
    (
        "night layout relabels after the file's sharesPerGpu: the layout wins",
        [
            ("file", {"sharesPerGpu": 4}),
            ("labels", {LABEL_MAX_SHARES_PER_GPU: "4"}),
            ("labels", {LABEL_MAX_SHARES_PER_GPU: "1", LABEL_LAYOUT: "1"}),
        ],
        {LABEL_MAX_SHARES_PER_GPU: "1"},
    ),
    ("unset in the file: the label stands", [("file", {"sharesPerGpu": None}), ("labels", {LABEL_MAX_SHARES_PER_GPU: "2"})], {LABEL_MAX_SHARES_PER_GPU: "2"}),
    ("set only in the file", [("file", {"sharesPerGpu": 3}), ("labels", {})], {LABEL_MAX_SHARES_PER_GPU: "3"}),
]


@pytest.mark.parametrize(("steps", "expected"), [(s, e) for _, s, e in TABLE], ids=[t[0] for t in TABLE])
def test_latest_edit_wins(steps: list[Step], expected: dict[str, str | None]) -> None:
    settings = PoolSettings()
    labels: dict[str, str] = {LABEL_POOL: POOL}
    for source, values in steps:
        if source == "file":
            settings.load_file({POOL: values})
        else:
            labels = {LABEL_POOL: POOL, **{k: str(v) for k, v in values.items()}}
            settings.effective_labels("n", labels)  # the node as the watch reports it
    effective = settings.effective_labels("n", labels)  # the node re-applied after the last step
    assert {k: effective.get(k) for k in expected} == expected


def test_load_file_reports_only_pools_that_changed() -> None:
    settings = PoolSettings()
    assert settings.load_file({"a": {"placement": "spread"}, "b": {"placement": "binpack"}}) == {"a", "b"}
    assert settings.load_file({"a": {"placement": "spread"}, "b": {"placement": "spread"}}) == {"b"}
    assert settings.load_file({"a": {"placement": "spread"}}) == {"b"}, "a pool gone from the file changed too"
    assert settings.load_file({"a": {"placement": "spread"}}) == set()


def test_other_pools_and_unknown_nodes_keep_their_labels() -> None:
    settings = PoolSettings()
    settings.load_file({POOL: {"placement": "spread"}})
    labels = {LABEL_POOL: "other", LABEL_GPU_PLACEMENT: "binpack"}
    assert settings.effective_labels("m", labels) == labels
