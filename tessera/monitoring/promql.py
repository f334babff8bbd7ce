"""Which metric names a PromQL expression reads: a small lexer, not a parser.

`promtool` decides whether an expression is valid PromQL (tests run every panel query and every
alert through it); this module only lists the metric names in an expression already known to
parse, so they can be checked against what our components and dcgm-exporter export. It drops
string literals, label matchers, range and subquery brackets and the label lists of grouping
modifiers, then keeps each identifier that is not a keyword and not called as a function.
"""
from __future__ import annotations

import re
from typing import Final

_STRINGS: Final = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS: Final = re.compile(r"\{[^{}]*\}")
_BRACKETS: Final = re.compile(r"\[[^\[\]]*\]")
_LABEL_LISTS: Final = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER: Final = re.compile(r"(?<![\w:.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
KEYWORDS: Final = frozenset(
    {
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
        "limitk", "limit_ratio", "and", "or", "unless", "atan2", "bool", "offset", "by", "without", "on", "ignoring",
        "group_left", "group_right", "inf", "nan", "start", "end",
    }
)


def metric_names(expr: str) -> frozenset[str]:
    """Metric names `expr` selects, e.g. {"up"} for `max(up{job="x"}) by (job)`."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _LABEL_LISTS.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return frozenset(names)
