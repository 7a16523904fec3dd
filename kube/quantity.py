"""Kubernetes resource quantities ('250m', '1Gi', '1e3'), strictly: what the API server accepts, nothing more.

kube/ is the one place that imports the client, so the agent's and the webhook's resource arithmetic ask here.

The official client's `kubernetes.utils.parse_quantity` does the arithmetic; it is lenient about the text
(Python's Decimal accepts 'NaN', '1_000', ' 1 ', and 'K' is taken for kilo), so the text is checked first
against apimachinery's grammar (resource.ParseQuantity).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import (
    parse_quantity as _client_parse,
)  # not kubernetes.utils: its __init__ loads the models

_QUANTITY = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?")


def parse_quantity(value: object) -> Decimal:
    """The quantity's exact value; ValueError naming the text when it is not a valid quantity."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{value!r} is not a quantity (expected a string such as '500m' or '1Gi')")
    text = str(value)
    if not _QUANTITY.fullmatch(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    try:
        return Decimal(_client_parse(text))  # type: ignore[no-untyped-call]
    except (ValueError, ArithmeticError, InvalidOperation):
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from None


def ceil_int(value: Decimal) -> int:
    """Round up to a whole number, as Quantity.Value()/MilliValue() do."""
    return math.ceil(value)
