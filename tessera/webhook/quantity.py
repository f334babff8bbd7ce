"""Kubernetes quantities for extended resources, which must be whole numbers."""
from __future__ import annotations

import re
from fractions import Fraction

_QUANTITY = re.compile(r"^([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_MULTIPLIER: dict[str, Fraction] = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


class QuantityError(ValueError):
    pass


def parse_whole_quantity(value: object) -> int:
    """`"40"`, `40`, `"1k"`, `"2000m"` -> int; fractions and malformed strings raise QuantityError.

    Extended resources cannot be fractional (the API server rejects `0.5`), so a fraction here
    is a user error we report before the API server gives a less specific one.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity")
    number = Fraction(match.group(1)) * _MULTIPLIER[match.group(2) or ""]
    if number.denominator != 1:
        raise QuantityError(f"{value!r} is not a whole number")
    return int(number)
