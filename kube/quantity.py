"""Kubernetes resource quantities ('250m', '16Gi', '8') with the official client's parser."""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils import parse_quantity as _parse_quantity


def parse_quantity(value: object) -> Decimal | None:
    """The quantity as a Decimal; None when absent, malformed or not finite."""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return None
    try:
        parsed = Decimal(_parse_quantity(value))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, ArithmeticError):
        return None
    return parsed if parsed.is_finite() else None
