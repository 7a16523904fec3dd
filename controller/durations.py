"""Go-style duration strings ("3m", "1h30m", "500ms"), as crane's policy file uses them.

Crane decodes `period`/`timeRange` with `metav1.Duration`, i.e. Go's `time.ParseDuration`; we accept the
same grammar so one policy file serves both crane-scheduler and Colo.
"""

from __future__ import annotations

import math
import re

_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Return the duration in seconds; raise ValueError on anything Go's ParseDuration would reject."""
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string, got {type(text).__name__}")
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    pos = 0
    total = 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r} (expected e.g. '3m', '1h30m', '500ms')")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


def to_seconds(value: object) -> float:
    """Accept a Go duration string or a plain number of seconds (our own config allows both)."""
    if isinstance(value, bool):
        raise ValueError("duration must be a number of seconds or a string like '30s'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = parse_go_duration(value)
    else:
        raise ValueError("duration must be a number of seconds or a string like '30s'")
    if not math.isfinite(seconds):
        raise ValueError("duration must be finite")
    return seconds
