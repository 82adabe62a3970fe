"""Kubernetes resource quantities (k8s.io/apimachinery resource.Quantity), exactly.

A quantity is kept as an exact rational number so that sums of container requests
round the way the API machinery rounds: `MilliValue()` and `Value()` round up.
"""
from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
# sign, digits with at most one dot, then a suffix: binary SI, decimal SI or a decimal exponent.
_QUANTITY = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse `500m`, `2`, `1Gi`, `129e6`, `123Mi`, `1.5` into an exact Fraction."""
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a quantity")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"{text!r} is not a quantity")
        return Fraction(str(text))
    if not isinstance(text, str):
        raise QuantityError(f"{text!r} is not a quantity")
    return _parse_text(text)


@functools.lru_cache(maxsize=8192)
def _parse_text(text: str) -> Fraction:
    """The same few strings ("100m", "500Mi") arrive for every pod of a workload: parsed once
    (Fractions are immutable, so sharing them is safe; errors are not cached)."""
    m = _QUANTITY.match(text.strip())
    if not m or text != text.strip():
        raise QuantityError(f"{text!r} is not a quantity")
    sign, digits, suffix = m.group(1), m.group(2), m.group(3) or ""
    value = Fraction(digits)
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    else:  # decimal exponent
        exp = int(suffix[1:])
        if abs(exp) > 60:
            raise QuantityError(f"{text!r} is not a quantity: exponent out of range")
        value *= Fraction(10) ** exp
    return -value if sign == "-" else value


def milli_value(q: Fraction) -> int:
    """Quantity.MilliValue(): thousandths, rounded up. (Integer arithmetic on the numerator and
    denominator: `math.ceil(q * 1000)` built a Fraction, a gcd, for every pod's cpu in every cache.)"""
    return -(-q.numerator * 1000 // q.denominator)


def value(q: Fraction) -> int:
    """Quantity.Value(): whole units, rounded up."""
    return -(-q.numerator // q.denominator)


def format_milli(milli: int) -> str:
    """A readable cpu figure: 1500 -> '1500m', 2000 -> '2'."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_bytes(n: int) -> str:
    """A readable memory figure in the largest exact binary unit: 2147483648 -> '2Gi'."""
    for suffix, size in reversed(list(_BINARY.items())):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


def format_exact(q: Fraction) -> str:
    """An exact quantity string that parses back to the same value ('1.5', '1073741824', '0.0001')."""
    if q.denominator == 1:
        return str(q.numerator)
    return _format_fraction(q.numerator, q.denominator)


@functools.lru_cache(maxsize=4096)
def _format_fraction(numerator: int, denominator: int) -> str:
    """(Cached, by the two integers: a Fraction's own hash is slow. Every pod encoded carries a few
    such quantities, most of them the same, and the arithmetic below took 4 us each, a sixth of
    encoding a pod.)"""
    q = Fraction(numerator, denominator)
    d, k = denominator, 0
    while d % 10 == 0 or d % 2 == 0 or d % 5 == 0:
        if d % 10 == 0:
            d //= 10
        elif d % 2 == 0:
            d //= 2
        else:
            d //= 5
        k += 1
    if d != 1:
        raise QuantityError(f"{q} has no exact decimal form")
    scaled = q * 10**k
    assert scaled.denominator == 1
    sign = "-" if scaled < 0 else ""
    digits = str(abs(scaled.numerator)).rjust(k + 1, "0")
    return f"{sign}{digits[:-k]}.{digits[-k:]}".rstrip("0").rstrip(".")


# Quantity formats (apimachinery's resource.Format): how a quantity is written back.
BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENT = "BinarySI", "DecimalSI", "DecimalExponent"
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def quantity_format(text: str | int | float) -> str:
    """The format a quantity is written in: a binary suffix (Ki..Ei) makes BinarySI, an exponent
    (1e3) DecimalExponent, anything else (a plain number, m, k, M, ...) DecimalSI."""
    if isinstance(text, str):
        m = _QUANTITY.match(text.strip())
        suffix = (m.group(3) or "") if m else ""
        if suffix in _BINARY:
            return BINARY_SI
        if suffix[:1] in ("e", "E"):
            return DECIMAL_EXPONENT
    return DECIMAL_SI


def quantity_string(q: Fraction, fmt: str = DECIMAL_SI) -> str:
    """Quantity.String() of the value q in format fmt: kube's canonical form ("1500m" -> "1500m",
    "0.5" -> "500m", "2000m" -> "2", "1024Mi" -> "1Gi", "1000" -> "1k"). Like kube, a value
    finer than a nano is rounded up to one, and a binary value below 1024 or not whole is written
    in decimal."""
    nanos = math.ceil(q * 10**9)
    if fmt == BINARY_SI and abs(nanos) >= 1024 * 10**9 and nanos % 10**9 == 0:
        whole = nanos // 10**9
        for suffix, size in reversed(list(_BINARY.items())):
            if whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    if nanos == 0:
        return "0"
    mantissa, exponent = nanos, -9
    while mantissa % 1000 == 0 and exponent < 18:
        mantissa //= 1000
        exponent += 3
    if fmt == DECIMAL_EXPONENT:
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"


def canonical_quantity(text: str | int | float) -> str:
    """The quantity as kube writes it back after reading `text` (QuantityError when it is none)."""
    return quantity_string(parse_quantity(text), quantity_format(text))
