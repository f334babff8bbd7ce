"""`MetricSpec`: one exported metric as a stable declaration (name, type, labels, meaning).

Each component's metrics are declared as a tuple of these in `tessera.model.metrics.<component>`; tests hold the real `/metrics` endpoints to those tuples and docs/monitoring.md's metric
table to the same tuples, so a rename or a new label is a reviewed change in three places.
Imports nothing of ours: the node agent, the device plugin, the extender and the webhook all use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

MetricType = Literal["counter", "gauge", "histogram"]

# suffixes the Prometheus text format adds to a family's name, per type
_SERIES_SUFFIXES: Final[dict[str, tuple[str, ...]]] = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
}


@dataclass(frozen=True)
class MetricSpec:
    """A metric family as Prometheus scrapes it: `name` is the family name without `_total`."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()

    @property
    def exposed_name(self) -> str:
        """The name a query uses for the family's main series (`_total` for counters)."""
        return self.name + ("_total" if self.type == "counter" else "")

    def series_names(self) -> tuple[str, ...]:
        """Every series name the family exposes (histograms: `_bucket`, `_sum`, `_count`)."""
        return tuple(self.name + suffix for suffix in _SERIES_SUFFIXES[self.type])
