"""kube.quantity: apimachinery's quantity grammar, exactly (the official client's arithmetic, a strict text)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kube.quantity import ceil_int, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("1500m", Decimal("1.5")),
        ("0.5", Decimal("0.5")),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+2", Decimal(2)),
        ("-1", Decimal(-1)),
        ("250u", Decimal("0.00025")),
        ("7n", Decimal("0.000000007")),
        ("1k", Decimal(1000)),
        ("1M", Decimal(10**6)),
        ("1E", Decimal(10**18)),
        ("1Ki", Decimal(1024)),
        ("1.5Gi", Decimal(3 << 29)),
        ("1Ei", Decimal(1 << 60)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("12e+2", Decimal(1200)),
        (3, Decimal(3)),
    ],
)
def test_valid_quantities(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    ["", " 1", "1 ", "NaN", "Infinity", "1_000", "1K", "1ki", "1mi", "1KiB", "1.2.3", "e3", "1e", "1e1.5", "--1",
     "0x10", "1m1", "Mi"],
)  # fmt: skip
def test_text_the_api_server_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [None, 1.5, True, ["1"]])
def test_non_strings_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="is not a quantity"):
        parse_quantity(value)


def test_ceil_int_rounds_up_like_quantity_value() -> None:
    assert [ceil_int(Decimal(x)) for x in ("0.1", "1", "1.0001", "-0.5")] == [1, 1, 2, 0]
