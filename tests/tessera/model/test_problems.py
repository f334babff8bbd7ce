"""Problem paths read like the config keys a user edits."""
from __future__ import annotations

import pytest

from tessera.model.problems import ConfigError, Problem, format_path


@pytest.mark.parametrize(
    ("parts", "text"),
    [
        (("nodePools", 2, "mig", "profile"), "nodePools[2].mig.profile"),
        (("tencentcloud:region",), "tencentcloud:region"),
        (("nodePools", 0, "labels", "tessera.dev/pool"), 'nodePools[0].labels["tessera.dev/pool"]'),
        (("nodePools", 0, "labels", "team"), "nodePools[0].labels.team"),
        (("quotas", 1), "quotas[1]"),
        ((), ""),
    ],
)
def test_format_path(parts: tuple[str | int, ...], text: str) -> None:
    assert format_path(parts) == text


def test_problem_and_error_text() -> None:
    error = ConfigError([Problem("nodePools[0].maxSize", "must be at least minSize (3), got 1"), Problem("", "no such file")])
    assert str(error) == "nodePools[0].maxSize: must be at least minSize (3), got 1\nno such file"
