"""Fixtures for the `tessera.httpd` tests; the toy service lives in `httpd_toy`, the raw client in `raw_http`."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from httpd_toy import ToyService, start_toy  # noqa: E402


@pytest.fixture
def toy() -> Iterator[ToyService]:
    service = start_toy()
    yield service
    service.release.set()
    service.server.stop(drain_s=1.0)
