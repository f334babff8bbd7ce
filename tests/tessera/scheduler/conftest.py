"""Fixtures for the extender tests; the helpers live in `extender_harness`."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from extender_harness import Harness  # noqa: E402

from tessera.kube.fake import FakeKubeApi  # noqa: E402


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness(FakeKubeApi())
    yield h
    h.close()
