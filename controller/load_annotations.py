"""Node annotation keys and the crane value format `"<value>,<UTC time>"`, byte for byte.

crane-scheduler's Dynamic plugin splits the value on ",", parses the first part as a float and the second
with Go layout `2006-01-02T15:04:05Z`; anything else is treated as missing. Formatting and parsing live
together here so the writer and the scorer can never disagree.
"""

from __future__ import annotations

import calendar
import math
import re
import time
from dataclasses import dataclass
from decimal import Decimal

from contract import annotations as keys

HOT_VALUE = keys.HOT_VALUE
LOAD_SCORE = keys.LOAD_SCORE
#: Deprecated: the controller's copy of the agent's capacity, written only with
#: `legacy_oversubscription_annotation: true` (the extender reads the agent's own annotations).
OVERSUBSCRIPTION = keys.LEGACY_OVERSUBSCRIPTION
#: The agent's published capacity (integer milli-CPU, integer bytes), read from the node informer.
PUBLISHED_CPU = keys.OVERSUBSCRIPTION_CPU
PUBLISHED_MEMORY = keys.OVERSUBSCRIPTION_MEMORY

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_TS = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z")
# Go's strconv.ParseFloat accepts more spellings, but these are all any writer of these keys emits.
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INT = re.compile(r"\d+")
#: An integer the agent publishes: ASCII digits, at most int64's 19 (`str.isdigit` would take '²' and '٥').
_PUBLISHED = re.compile(r"[0-9]{1,19}")


def format_time(epoch: float) -> str:
    """UTC wall time in crane's layout, truncated to the second."""
    return time.strftime(TIME_FORMAT, time.gmtime(int(epoch)))


def parse_time(text: str) -> float | None:
    """Inverse of format_time; None when the text is not exactly in that layout."""
    m = _TS.fullmatch(text)
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups())
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h <= 23 and mi <= 59 and s <= 59):
        return None
    try:
        return float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None


def sanitize_ratio(value: float) -> float:
    """NaN, infinities, negatives and -0.0 become 0 (the issue's rule; crane ignores negatives)."""
    if not math.isfinite(value) or value <= 0.0:
        return 0.0
    return value


def format_value(value: float, epoch: float) -> str:
    """`"0.35212,2026-11-22T10:00:00Z"`: the ratio with 5 decimals, a comma, the UTC time."""
    return f"{sanitize_ratio(value):.5f},{format_time(epoch)}"


def parse_value(text: str) -> tuple[float, float] | None:
    """(value, epoch) as crane would read it, or None for anything crane would reject."""
    parts = text.split(",")
    if len(parts) != 2:
        return None
    raw, stamp = parts
    if _FLOAT.fullmatch(raw) is None:
        return None
    epoch = parse_time(stamp)
    if epoch is None:
        return None
    value = float(raw)
    if value < 0 or not math.isfinite(value):
        return None
    return value, epoch


def format_score(score: int, epoch: float) -> str:
    """`colo.io/load-score`: an integer 0..100 plus the time it was computed."""
    return f"{int(score)},{format_time(epoch)}"


@dataclass(frozen=True, slots=True)
class Oversubscription:
    """Capacity a node can lend to offline pods, as the agent publishes it."""

    cpu_millicores: int
    memory_bytes: int


def format_oversubscription(o: Oversubscription, epoch: float) -> str:
    """`"<cpu millicores>,<memory bytes>,<UTC time>"`; negatives are clamped to 0."""
    return f"{max(0, o.cpu_millicores)},{max(0, o.memory_bytes)},{format_time(epoch)}"


def parse_oversubscription(text: str) -> tuple[Oversubscription, float] | None:
    """Inverse of format_oversubscription; None when malformed."""
    parts = text.split(",")
    if len(parts) != 3 or _INT.fullmatch(parts[0]) is None or _INT.fullmatch(parts[1]) is None:
        return None
    epoch = parse_time(parts[2])
    if epoch is None:
        return None
    return Oversubscription(int(parts[0]), int(parts[1])), epoch


def parse_published(
    cpu: str | None, memory: str | None, allocatable: tuple[Decimal | None, Decimal | None] = (None, None)
) -> tuple[Oversubscription | None, str | None]:
    """The agent's `volcano.sh/oversubscription-{cpu,memory}` as (capacity, None); (None, reason) when either
    is missing (`missing`), not an integer in ASCII digits (`malformed`) or above the node's allocatable
    (`out_of_range`). `allocatable`: (cores, bytes) from the Node's status, None where unknown."""
    if cpu is None or memory is None:
        return None, "missing"
    if _PUBLISHED.fullmatch(cpu) is None or _PUBLISHED.fullmatch(memory) is None:
        return None, "malformed"
    millicores, nbytes = int(cpu), int(memory)
    alloc_cpu, alloc_memory = allocatable
    if (alloc_cpu is not None and millicores > alloc_cpu * 1000) or (
        alloc_memory is not None and nbytes > alloc_memory
    ):
        return None, "out_of_range"
    return Oversubscription(millicores, nbytes), None
