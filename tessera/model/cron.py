"""Five-field cron expressions (minute hour day-of-month month day-of-week), parsed and matched.

Used to validate re-partitioning schedules in stack config and, by the re-partitioning job, to
decide which layout applies at a given time. Supports ``*``, numbers, ranges ``a-b``, steps
``*/n`` and ``a-b/n``, lists ``a,b``, and month/day names (JAN..DEC, SUN..SAT); 7 also means Sunday.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

_FIELDS: Final = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))
_MONTHS: Final = {name: i + 1 for i, name in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"))}
_DAYS: Final = {name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}


@dataclass(frozen=True)
class CronSchedule:
    """The sets of values each field matches."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]  # 0 = Sunday
    day_of_month_any: bool
    day_of_week_any: bool

    def matches(self, moment: datetime) -> bool:
        """True when the schedule fires in ``moment``'s minute (standard cron day semantics)."""
        if moment.minute not in self.minutes or moment.hour not in self.hours or moment.month not in self.months:
            return False
        dom = moment.day in self.days_of_month
        dow = (moment.isoweekday() % 7) in self.days_of_week
        if self.day_of_month_any or self.day_of_week_any:
            return dom and dow
        return dom or dow  # cron: when both are restricted, either one matching is enough


def _number(text: str, names: dict[str, int], label: str, low: int, high: int) -> int:
    upper = text.upper()
    if upper in names:
        return names[upper]
    if not text.isdigit():
        raise ValueError(f"{label} field: {text!r} is not a number")
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"{label} field: {value} is outside {low}-{high}")
    return value


def _field(text: str, label: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"{label} field: step {step_text!r} must be a positive number")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = _number(first, names, label, low, high), _number(last, names, label, low, high)
            if start > end:
                raise ValueError(f"{label} field: range {base!r} runs backwards")
        else:
            start = _number(base, names, label, low, high)
            end = high if slash else start
        values.update(range(start, end + 1, step))
    return frozenset(values)


def parse_cron(expression: str) -> CronSchedule:
    """Parse a 5-field cron expression; raise ValueError naming the bad field."""
    parts = expression.split()
    if len(parts) != 5:
        raise ValueError(f"{expression!r} is not a cron schedule: expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}")
    sets = [
        _field(part, label, low, high, _MONTHS if label == "month" else _DAYS if label == "day of week" else {})
        for part, (label, low, high) in zip(parts, _FIELDS, strict=True)
    ]
    days_of_week = frozenset(d % 7 for d in sets[4])
    return CronSchedule(sets[0], sets[1], sets[2], sets[3], days_of_week, parts[2] == "*", parts[4] == "*")
