"""Hold a scraped /metrics page to a component's declared `MetricSpec`s.

Used by the tests that scrape each component's real endpoint, and usable against a live pod
(`curl .../metrics`) when a dashboard shows nothing: it names the family that is missing, extra,
of another type or with other labels.
"""
from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from tessera.model.metrics.spec import MetricSpec

_STRUCTURAL_LABELS = frozenset({"le", "quantile"})


def exposed_families(text: str) -> dict[str, tuple[str, frozenset[str], int]]:
    """Family name -> (type, label names over its samples, sample count)."""
    out: dict[str, tuple[str, frozenset[str], int]] = {}
    for family in text_string_to_metric_families(text):
        labels = frozenset(k for sample in family.samples for k in sample.labels) - _STRUCTURAL_LABELS
        out[family.name] = (family.type, labels, len(family.samples))
    return out


def conformance_problems(specs: Iterable[MetricSpec], text: str) -> list[str]:
    """What differs between the declared families and the exposition (empty when they agree).
    A family without samples cannot show its labels; its labels are not checked."""
    declared = {s.name: s for s in specs}
    exposed = exposed_families(text)
    for name in list(exposed):  # prometheus-client's creation timestamps of counters and histograms
        base = declared.get(name.removesuffix("_created"))
        if name.endswith("_created") and base is not None and base.type in ("counter", "histogram"):
            del exposed[name]
    problems = [f"{name}: served but not declared" for name in sorted(set(exposed) - set(declared))]
    problems += [f"{name}: declared but not served" for name in sorted(set(declared) - set(exposed))]
    for name in sorted(set(declared) & set(exposed)):
        spec, (kind, labels, samples) = declared[name], exposed[name]
        if kind != spec.type:
            problems.append(f"{name}: served as {kind}, declared {spec.type}")
        if samples and labels != frozenset(spec.labels):
            problems.append(f"{name}: served with labels {sorted(labels)}, declared {sorted(spec.labels)}")
    return problems
