"""Step 4: how much load the low nodes can take, and whether anything may happen at all.

The budget per resource is the room every low node has up to its high threshold. Nothing moves without
a low node and a confirmed source (and at least `number_of_nodes` low nodes, when set): evicting with
nowhere to go would only reshuffle load among hot nodes.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.rebalance.traits import ZERO, Amounts


def budget(rooms: Iterable[tuple[Amounts, Amounts]]) -> Amounts:
    """Σ over low nodes of max(0, high threshold - usage), from (usage, high threshold) in absolute units."""
    total = ZERO
    for usage, high in rooms:
        total = total + Amounts(max(0.0, high.cpu - usage.cpu), max(0.0, high.memory - usage.memory))
    return total


def exhausted(b: Amounts) -> bool:
    """Koordinator's rule: eviction goes on only while every resource has budget left."""
    return b.cpu <= 0 or b.memory <= 0


def gate(low_nodes: int, sources: int, number_of_nodes: int) -> str | None:
    """Why nothing may happen this cycle, or None."""
    if sources == 0:
        return "no_confirmed_high_node"
    if low_nodes == 0:
        return "no_low_node"
    if low_nodes < number_of_nodes:
        return "too_few_low_nodes"
    return None
