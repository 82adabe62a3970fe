"""Go's int64 and float64 arithmetic, for Python ints and NumPy int64 arrays.

Go's integer division truncates toward zero (Python's // floors), int64 products wrap, and
math.Round rounds half away from zero (Python's round and NumPy's rint round half to even).
Candidates for a shared helper module: every scoring plugin needs them.
"""
from __future__ import annotations

import math

import numpy as np

_MASK = (1 << 64) - 1
_SIGN = 1 << 63


def wrap64(x: int) -> int:
    """An int as Go's int64 would hold it after overflow."""
    x &= _MASK
    return x - (1 << 64) if x & _SIGN else x


def div64(a: int, b: int) -> int:
    """Go's a / b on int64 (b != 0): truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def round_half_away(x: float) -> float:
    """math.Round: nearest integer, halves away from zero."""
    t = math.trunc(x)
    if abs(x - t) >= 0.5:
        t += 1 if x > 0 else -1
    return float(t)


def div64_arr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise Go int64 division; where b == 0 the result is 0 (callers mask those out)."""
    has_zero = not b.all()
    safe = np.where(b == 0, 1, b) if has_zero else b
    q = a // safe
    if a.min(initial=0) < 0 or safe.min(initial=1) < 0:
        # Floor and truncation differ when the division is inexact and the signs differ.
        q = q + ((q * safe != a) & ((a < 0) != (safe < 0)))
    return np.where(b == 0, 0, q) if has_zero else q


def round_half_away_arr(x: np.ndarray) -> np.ndarray:
    """Elementwise math.Round (x - trunc(x) is exact in float64, so the comparison is too)."""
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0.0)


def trunc_to_int64(x: np.ndarray) -> np.ndarray:
    """Go's int64(float64): truncation toward zero (inputs here are finite and in range)."""
    return np.trunc(x).astype(np.int64)
