"""Fixtures: every stack file in stacks/, loaded and built once per session."""
from __future__ import annotations

import pytest
from manifests_helpers import STACK_NAMES, BuiltStack, build


@pytest.fixture(scope="session", params=STACK_NAMES)
def stack(request: pytest.FixtureRequest) -> BuiltStack:
    return build(str(request.param))


@pytest.fixture(scope="session")
def all_stacks() -> list[BuiltStack]:
    return [build(n) for n in STACK_NAMES]
