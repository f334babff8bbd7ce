"""Kubernetes resource quantities ("250m", "4Gi", "1e3") as exact Decimals, in base units."""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

from tessera.alloc.model import InvalidRequest

_SUFFIX = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
}


def parse_quantity(text: object) -> Decimal:
    """A Kubernetes resource quantity ("250m", "4Gi", "1e3", 2) as a Decimal in base units."""
    s = str(text).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if s.endswith(suffix) and s[: -len(suffix)]:
            number, factor = s[: -len(suffix)], _SUFFIX[suffix]
            break
    else:
        number, factor = s, Decimal(1)
    try:
        return Decimal(number) * factor
    except InvalidOperation:
        raise InvalidRequest(f"cannot read resource quantity {text!r}") from None
