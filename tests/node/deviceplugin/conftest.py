from __future__ import annotations

from collections.abc import Iterator

import pytest

from dp_harness import Harness


@pytest.fixture
def node() -> Iterator[Harness]:
    harness = Harness()
    harness.start_plugin()
    yield harness
    harness.close()
