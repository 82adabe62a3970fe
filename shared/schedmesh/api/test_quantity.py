import math
from fractions import Fraction

import pytest

from schedmesh.api.quantity import QuantityError, format_bytes, format_milli, milli_value, parse_quantity, value


@pytest.mark.parametrize("text, milli, whole", [
    ("500m", 500, 1),
    ("2", 2000, 2),
    ("1.5", 1500, 2),
    ("1Gi", 1024**3 * 1000, 1024**3),
    ("123Mi", 123 * 2**20 * 1000, 123 * 2**20),
    ("129e6", 129 * 10**9, 129 * 10**6),
    ("129E6", 129 * 10**9, 129 * 10**6),
    ("4G", 4 * 10**12, 4 * 10**9),
    ("32879456Ki", 32879456 * 1024 * 1000, 32879456 * 1024),
    ("7500m", 7500, 8),
    ("0.1m", 1, 1),  # MilliValue rounds up
    ("100u", 1, 1),
    ("1n", 1, 1),
    ("0", 0, 0),
    (".5", 500, 1),
    ("+1k", 1000 * 1000, 1000),
    (3, 3000, 3),
    (0.25, 250, 1),
], ids=lambda v: str(v))
def test_parse(text, milli, whole):
    q = parse_quantity(text)
    assert milli_value(q) == milli
    assert value(q) == whole


@pytest.mark.parametrize("text", ["12x", "", "1.2.3", "Gi", "1 Gi", " 1", "1e", "--1", "1iK", True, None, "1GiB"])
def test_rejects(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_rounding_up_is_the_exact_ceiling():
    # (integer arithmetic on numerator and denominator: checked against Fraction's own ceiling)
    for numerator in range(-2001, 2002, 7):
        for denominator in (1, 2, 3, 7, 1000, 1024, 10**9, 3 * 2**20):
            q = Fraction(numerator, denominator)
            assert milli_value(q) == math.ceil(q * 1000), q
            assert value(q) == math.ceil(q), q


def test_exact_sum():
    # Sub-milli parts add up exactly before rounding, as resource.Quantity does.
    assert milli_value(parse_quantity("0.4m") + parse_quantity("0.4m")) == 1
    assert parse_quantity("1Ki") == Fraction(1024)


@pytest.mark.parametrize("milli, text", [(1500, "1500m"), (2000, "2"), (0, "0")])
def test_format_milli(milli, text):
    assert format_milli(milli) == text


def test_format_bytes():
    assert format_bytes(2 * 1024**3) == "2Gi"
    assert format_bytes(1000) == "1000"
