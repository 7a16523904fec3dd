"""The crane annotation format, byte for byte, and how crane would read it back."""

from __future__ import annotations

import math

import pytest

from controller import load_annotations as ann

T = 1795341600.0  # 2026-11-22T10:00:00Z


def test_time_layout() -> None:
    assert ann.format_time(T) == "2026-11-22T10:00:00Z"
    assert ann.format_time(T + 0.999) == "2026-11-22T10:00:00Z"
    assert ann.parse_time("2026-11-22T10:00:00Z") == T


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.352118, "0.35212,2026-11-22T10:00:00Z"),
        (0.35212, "0.35212,2026-11-22T10:00:00Z"),
        (1.0, "1.00000,2026-11-22T10:00:00Z"),
        (0.0, "0.00000,2026-11-22T10:00:00Z"),
        (1.25, "1.25000,2026-11-22T10:00:00Z"),
        (float("nan"), "0.00000,2026-11-22T10:00:00Z"),
        (-0.3, "0.00000,2026-11-22T10:00:00Z"),
        (-0.0, "0.00000,2026-11-22T10:00:00Z"),
        (math.inf, "0.00000,2026-11-22T10:00:00Z"),
        (2.0, "2.00000,2026-11-22T10:00:00Z"),
    ],
)
def test_value_format_byte_for_byte(value: float, text: str) -> None:
    assert ann.format_value(value, T) == text


@pytest.mark.parametrize(
    "text",
    [
        "0.5",
        "0.5,2026-11-22 10:00:00",
        "0.5,2026-11-22T10:00:00+08:00",
        "-0.5,2026-11-22T10:00:00Z",
        "abc,2026-11-22T10:00:00Z",
        "0.5,2026-11-22T10:00:00Z,x",
        "0.5,2026-13-22T10:00:00Z",
        "",
    ],
)
def test_parse_rejects_what_crane_rejects(text: str) -> None:
    assert ann.parse_value(text) is None


def test_round_trip() -> None:
    assert ann.parse_value(ann.format_value(0.123456, T)) == (0.12346, T)
    over = ann.Oversubscription(1500, 2 << 30)
    assert ann.format_oversubscription(over, T) == "1500,2147483648,2026-11-22T10:00:00Z"
    assert ann.parse_oversubscription("1500,2147483648,2026-11-22T10:00:00Z") == (over, T)
    assert ann.parse_oversubscription("1500,x,2026-11-22T10:00:00Z") is None
    assert ann.format_score(87, T) == "87,2026-11-22T10:00:00Z"
