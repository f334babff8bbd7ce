"""Scores on kube-scheduler's extender scale."""
from __future__ import annotations

from collections.abc import Mapping


def extender_scores(scores: Mapping[str, float | None]) -> dict[str, int]:
    """Map raw scores to kube-scheduler's extender scale 0..10: the best node(s) get 10, every
    other node 0..9 by min-max, so the extender's first choice is never tied away by rounding."""
    valid = {n: s for n, s in scores.items() if s is not None}
    if not valid:
        return {n: 0 for n in scores}
    top = max(valid.values())
    rest = [s for s in valid.values() if s < top]
    low = min(rest) if rest else top
    out: dict[str, int] = {}
    for name, s in scores.items():
        if s is None:
            out[name] = 0
        elif s >= top:
            out[name] = 10
        elif top - low <= 0 or not rest:
            out[name] = 9
        else:
            out[name] = int(9 * (s - low) / (max(rest) - low)) if max(rest) > low else 9
    return out
