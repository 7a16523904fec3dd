"""Kubernetes quantities ('250m', '1Gi', '1.5') with the official client's parser: kube/ is the one place
that imports the client, so the agent's resource arithmetic asks here."""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity as _parse_quantity


def parse_quantity(value: object) -> Decimal:
    """The quantity as a Decimal; ValueError (or TypeError) when it is not one."""
    return Decimal(_parse_quantity(value))  # type: ignore[no-untyped-call]
