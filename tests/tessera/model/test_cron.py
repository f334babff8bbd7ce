"""Cron schedules used by re-partitioning: parsing errors and which minutes match."""
from __future__ import annotations

from datetime import datetime

import pytest

from tessera.model.cron import parse_cron


@pytest.mark.parametrize(
    ("expression", "moment", "fires"),
    [
        ("0 8 * * 1-5", datetime(2026, 11, 23, 8, 0), True),  # Monday 08:00
        ("0 8 * * 1-5", datetime(2026, 11, 22, 8, 0), False),  # Sunday
        ("0 8 * * MON-FRI", datetime(2026, 11, 27, 8, 0), True),  # Friday
        ("*/15 * * * *", datetime(2026, 1, 1, 3, 45), True),
        ("*/15 * * * *", datetime(2026, 1, 1, 3, 44), False),
        ("0 20 1 * 0", datetime(2026, 11, 1, 20, 0), True),  # day 1 or Sunday
        ("0 20 1 * 0", datetime(2026, 11, 8, 20, 0), True),  # a Sunday
        ("0 20 1 * 0", datetime(2026, 11, 9, 20, 0), False),
        ("0 0 * JAN,JUL 7", datetime(2026, 7, 5, 0, 0), True),  # 7 = Sunday
        ("30 2-4/2 * * *", datetime(2026, 1, 1, 4, 30), True),
        ("30 2-4/2 * * *", datetime(2026, 1, 1, 3, 30), False),
    ],
)
def test_matches(expression: str, moment: datetime, fires: bool) -> None:
    assert parse_cron(expression).matches(moment) is fires


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 8 * *", "expected 5 fields"),
        ("60 8 * * *", "minute field: 60 is outside 0-59"),
        ("0 24 * * *", "hour field: 24 is outside 0-23"),
        ("0 8 0 * *", "day of month field: 0 is outside 1-31"),
        ("0 8 * 13 *", "month field: 13 is outside 1-12"),
        ("0 8 * * 8", "day of week field: 8 is outside 0-7"),
        ("0 8-6 * * *", "hour field: range '8-6' runs backwards"),
        ("*/0 * * * *", "minute field: step '0' must be a positive number"),
        ("0 8 * * FUNDAY", "day of week field: 'FUNDAY' is not a number"),
    ],
)
def test_invalid_expressions_name_the_field(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cron(expression)
