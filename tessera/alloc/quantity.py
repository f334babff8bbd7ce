"""Resource quantities as the allocation model reads them: `tessera.model.quantity`, with an
unreadable one reported as the pod's (or node's) `InvalidRequest`."""
from __future__ import annotations

from decimal import Decimal

from tessera.alloc.model import InvalidRequest
from tessera.model import quantity


def parse_quantity(text: object) -> Decimal:
    """A Kubernetes resource quantity ("250m", "4Gi", "1e3", 2) as a Decimal in base units."""
    try:
        return quantity.parse_quantity(text)
    except ValueError:
        raise InvalidRequest(f"cannot read resource quantity {text!r}") from None
