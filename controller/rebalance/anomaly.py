"""Step 3: a high node becomes a source only after `consecutive_abnormalities` high cycles in a row.

So a spike moves nothing. The count resets when the node is not high, when it has no fresh sample (its
agent stopped answering: we cannot tell), and after pods were evicted from it (its usage window still
holds the evicted pods' load for a while; it must be confirmed again before more go).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def next_counts(previous: Mapping[str, int], high: Collection[str]) -> dict[str, int]:
    """High-cycle counts after this cycle: +1 for each high node, gone (0) for every other node."""
    return {name: previous.get(name, 0) + 1 for name in high}


def confirmed(counts: Mapping[str, int], needed: int) -> list[str]:
    """The nodes high for at least `needed` cycles in a row, sorted by name."""
    return sorted(name for name, n in counts.items() if n >= needed)


def after_evictions(counts: Mapping[str, int], acted_on: Collection[str]) -> dict[str, int]:
    """Counts with the nodes that lost pods this cycle reset to 0."""
    return {name: (0 if name in acted_on else n) for name, n in counts.items()}
