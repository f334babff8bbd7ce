"""Kubernetes resource quantities ("250m", "4Gi", "1e3", 2) as exact Decimals in base units
(k8s.io/apimachinery `resource.Quantity`: binary suffixes Ki..Ei, decimal n, u, m, k, M..E).

One parser for the allocation model (pod requests, node allocatable) and the DRA plugin
(ResourceSlice capacity, consumed capacity in allocation results)."""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Final

_SUFFIX: Final = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
}
_BY_LENGTH: Final = sorted(_SUFFIX, key=len, reverse=True)


def parse_quantity(text: object) -> Decimal:
    """The quantity in base units; ValueError naming it when it cannot be read (or is not finite)."""
    s = str(text).strip()
    for suffix in _BY_LENGTH:
        if s.endswith(suffix) and s[: -len(suffix)]:
            number, factor = s[: -len(suffix)], _SUFFIX[suffix]
            break
    else:
        number, factor = s, Decimal(1)
    try:
        value = Decimal(number) * factor
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a quantity") from None
    if not value.is_finite():
        raise ValueError(f"{text!r} is not a quantity")
    return value
