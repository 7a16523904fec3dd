"""Step 3: a high node becomes a source only after `consecutive_abnormalities` high cycles in a row.

So a spike moves nothing. The count resets when the node is not high, when it has no fresh sample (its
agent stopped answering: we cannot tell), and after pods were evicted from it. Its usage window still
holds the evicted pods' load for the window's span (5 minutes for `avg_5m`), so for that long the node
is *settling*: its count stays at 0, and it is confirmed afresh from usage that no longer includes them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

_SPANS = {"1m": 60.0, "5m": 300.0, "1h": 3600.0, "1d": 86400.0}


def settle_seconds(window: str) -> float:
    """How long a window remembers load that left: its span (`avg_5m`: 300 s, `max_avg_1h`: 3600 s)."""
    return _SPANS.get(window.rsplit("_", 1)[-1], 300.0)


def next_counts(previous: Mapping[str, int], high: Collection[str], settling: Collection[str] = ()) -> dict[str, int]:
    """High-cycle counts after this cycle: +1 for each high node not settling, gone (0) for the others."""
    return {name: previous.get(name, 0) + 1 for name in high if name not in settling}


def settling(acted_at: Mapping[str, float], now: float, seconds: float) -> set[str]:
    """The nodes that lost pods less than `seconds` ago."""
    return {name for name, at in acted_at.items() if now - at < seconds}


def confirmed(counts: Mapping[str, int], needed: int) -> list[str]:
    """The nodes high for at least `needed` cycles in a row, sorted by name."""
    return sorted(name for name, n in counts.items() if n >= needed)


def after_evictions(counts: Mapping[str, int], acted_on: Collection[str]) -> dict[str, int]:
    """Counts with the nodes that lost pods this cycle reset to 0."""
    return {name: (0 if name in acted_on else n) for name, n in counts.items()}
