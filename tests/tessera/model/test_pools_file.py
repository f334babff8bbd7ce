"""The mounted pools file, as the extender, the device plugin and the agent all read it: every kind
of rewrite is noticed, and a file that goes bad keeps the last good document in force."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tessera.model.pools_file import NO_DOCUMENT, PoolsFile, PoolsFileError, load_pools_file

OLD = 1_000_000_000  # an mtime long past: only a stat change makes the watcher parse again


def _write(path: Path, text: str, mtime: float = OLD) -> None:
    path.write_text(text)
    os.utime(path, (mtime, mtime))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", r"pools\.json:1: not JSON"),
        ("[1]", r"pools\.json: expected a JSON object of pool name -> pool settings, found list"),
        (None, r"missing\.json: no such file"),
    ],
    ids=["not JSON", "not an object", "missing"],
)
def test_the_strict_loader_names_the_file_and_what_is_wrong(tmp_path: Path, text: str | None, message: str) -> None:
    path = tmp_path / ("pools.json" if text is not None else "missing.json")
    if text is not None:
        path.write_text(text)
    with pytest.raises(PoolsFileError, match=message):
        load_pools_file(path)


def test_rewrites_in_place_and_symlink_swaps_are_noticed(tmp_path: Path) -> None:
    now = [2_000_000_000.0]
    path = tmp_path / "pools.json"
    _write(path, '{"p": {"placement": "binpack"}}')
    pools = PoolsFile(path, clock=lambda: now[0])
    first = pools.document()
    assert first == {"p": {"placement": "binpack"}}
    assert pools.document() is first and pools.reloads == 1, "unchanged: not parsed again, same object"
    _write(path, '{"p": {"placement": "spread"}}')  # other size, same old mtime
    assert pools.document() == {"p": {"placement": "spread"}}
    fresh = tmp_path / "next.json"  # kubelet's atomic update: a new inode, same size and mtime
    _write(fresh, '{"p": {"placement": "spreaD"}}')
    os.replace(fresh, path)
    assert pools.document() == {"p": {"placement": "spreaD"}}
    os.utime(path, (now[0] - 1, now[0] - 1))  # modified "just now": parsed on every use
    before = pools.reloads
    pools.document()
    pools.document()
    assert pools.reloads == before + 2


@pytest.mark.parametrize("breakage", ["removed", "not JSON", "not an object"])
def test_a_file_that_goes_bad_keeps_the_last_good_document_and_says_why_once(
    tmp_path: Path, breakage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "pools.json"
    _write(path, '{"p": {"policy": "fixed-share"}}')
    pools = PoolsFile(path, clock=lambda: 2_000_000_000.0)
    good = pools.document()
    if breakage == "removed":
        path.unlink()
    else:
        _write(path, "{half" if breakage == "not JSON" else "[]")
    with caplog.at_level(logging.WARNING, logger="tessera.pools"):
        assert pools.document() is good and pools.document() is good
    assert pools.problem is not None and str(path) in pools.problem
    warnings = [r.getMessage() for r in caplog.records if "cannot use the pools file" in r.getMessage()]
    assert len(warnings) == 1 and "stays in force" in warnings[0], warnings
    _write(path, '{"p": {"policy": "best-effort"}}')
    assert pools.document() == {"p": {"policy": "best-effort"}} and pools.problem is None


def test_with_no_good_document_yet_node_labels_decide(tmp_path: Path) -> None:
    path = tmp_path / "pools.json"
    _write(path, "{half")
    pools = PoolsFile(path)
    assert pools.document() is NO_DOCUMENT and pools.problem is not None
    assert PoolsFile(None).document() is NO_DOCUMENT, "no file named: labels alone"
