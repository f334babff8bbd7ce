from __future__ import annotations

from collections.abc import Iterator

import pytest
from dra_harness import DraNode


@pytest.fixture
def node() -> Iterator[DraNode]:
    harness = DraNode()
    harness.start_plugin()
    harness.start_kubelet()
    yield harness
    harness.close()
