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


# math.Log as Go computes it on amd64 (archLog, FreeBSD's e_log.c in SSE2, no FMA). It is not
# always the correctly rounded log that Python's math.log returns (log(3) differs by one ulp),
# and the weight feeds a rounding, so the exact Go value matters.
_L1, _L2, _L3, _L4 = 6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01, 2.222219843214978396e-01
_L5, _L6, _L7 = 1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_HALF_SQRT2 = 7.07106781186547524401e-01


def go_log(x: float) -> float:
    """Go's math.Log on amd64, bit for bit (its result can differ from math.log by one ulp)."""
    if x != x or x == math.inf:
        return x
    if x < 0:
        return math.nan
    if x == 0:
        return -math.inf
    f1, ki = math.frexp(x)
    if f1 <= _HALF_SQRT2:  # the assembly's "not (sqrt2/2 < f1)"
        f1 *= 2
        ki -= 1
    f = f1 - 1
    k = float(ki)
    s = f / (2 + f)
    s2 = s * s
    s4 = s2 * s2
    t1 = s2 * (_L1 + s4 * (_L3 + s4 * (_L5 + s4 * _L7)))
    t2 = s4 * (_L2 + s4 * (_L4 + s4 * _L6))
    r = t1 + t2
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)
