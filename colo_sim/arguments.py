"""The values of colo-sim's flags (durations, instants, sizes), parsed for argparse: a bad value is argparse's
one-line error, exit 2. Shared by `colo-sim` and `colo-sim convert`."""

from __future__ import annotations

import argparse
import datetime
import math
import re

from colo_sim.policies import POLICY_NAMES

#: The longest span of a trace accepted by default (`--max-span`): a year and a day.
MAX_SPAN_S = 366 * 86400.0

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """Seconds from '3600', '90s', '60m', '1h' or '1d'."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration like 3600, 60m or 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def instant(text: str) -> float:
    """Unix seconds from a number or an ISO 8601 date/time (UTC unless it names a zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither unix seconds nor an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def fraction(text: str) -> float:
    value = positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not in (0, 1]")
    return value


def policy_list(text: str) -> tuple[str, ...]:
    """Policy names, comma-separated, in the output's order (`colo_sim.policies.POLICY_NAMES`)."""
    asked = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(asked - set(POLICY_NAMES))
    if unknown or not asked:
        raise argparse.ArgumentTypeError(
            f"{', '.join(map(repr, unknown)) or repr(text)}: not a policy (known: {','.join(POLICY_NAMES)})"
        )
    return tuple(name for name in POLICY_NAMES if name in asked)


def memory(text: str) -> float:
    from kube.resources import quantity  # the official client's quantity parser

    q = quantity(text)
    if q is None or not q > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive quantity like 256Gi")
    return float(q)


def prometheus_duration(text: str) -> float:
    from colo_sim.prometheus import PrometheusError, parse_duration

    try:
        return parse_duration(text)
    except PrometheusError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
