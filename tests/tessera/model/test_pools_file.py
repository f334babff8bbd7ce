"""Reading the mounted pools file: bad content is ignored, and every kind of rewrite is noticed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tessera.model.pools_file import PoolsFileWatch, read_pools_file


@pytest.mark.parametrize(("text", "expected"), [('{"p": {"placement": "spread"}}', {"p": {"placement": "spread"}}), ("[1]", {}), ("{not json", {})])
def test_read_pools_file_ignores_what_is_not_a_pools_document(tmp_path: Path, text: str, expected: dict[str, object]) -> None:
    path = tmp_path / "pools.json"
    path.write_text(text)
    assert read_pools_file(path) == expected
    assert read_pools_file(tmp_path / "missing.json") == {} and read_pools_file(None) == {}


def test_watch_rereads_after_in_place_rewrite_and_symlink_swap(tmp_path: Path) -> None:
    now = [2_000_000_000.0]
    path = tmp_path / "pools.json"
    path.write_text('{"p": {"placement": "binpack"}}')
    os.utime(path, (1_000_000_000, 1_000_000_000))  # old file: only a stat change triggers a read
    watch = PoolsFileWatch(path, clock=lambda: now[0])
    assert watch.poll() == {"p": {"placement": "binpack"}}, "first poll reads"
    assert watch.poll() is None, "unchanged"
    path.write_text('{"p": {"placement": "spread"}}')  # other size, same old mtime
    os.utime(path, (1_000_000_000, 1_000_000_000))
    assert watch.poll() == {"p": {"placement": "spread"}}
    # kubelet's atomic update: a new file swapped in (new inode), same size and mtime
    fresh = tmp_path / "next.json"
    fresh.write_text('{"p": {"placement": "spreaD"}}')
    os.utime(fresh, (1_000_000_000, 1_000_000_000))
    os.replace(fresh, path)
    assert watch.poll() == {"p": {"placement": "spreaD"}}
    # modified "just now": read every time, even when the stat looks the same
    os.utime(path, (now[0] - 1, now[0] - 1))
    assert watch.poll() is not None and watch.poll() is not None
    path.unlink()
    assert watch.poll() == {}, "file gone: node labels apply"
    assert watch.poll() is None
