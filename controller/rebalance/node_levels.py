"""Step 2: low, high or normal against the thresholds (fixed, or deviations from the cluster average).

A node is low when every resource is under its low threshold, high when any resource is over its high
threshold. With `use_deviation_thresholds` (koordinator's useDeviationThresholds) the thresholds are
percentage points below/above the average usage of the nodes with a fresh sample, clamped to 0..100.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from controller.rebalance.traits import RESOURCES, Amounts

NodeClass = Literal["low", "normal", "high"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Effective low and high thresholds in percent of allocatable, per resource."""

    low: Amounts
    high: Amounts


def effective_limits(low: Amounts, high: Amounts, percents: Mapping[str, Amounts], *, deviation: bool) -> Limits:
    """The thresholds to compare with: as configured, or around the average of `percents` (node -> %)."""
    if not deviation:
        return Limits(low, high)
    n = len(percents)
    if n == 0:
        return Limits(Amounts(0.0, 0.0), Amounts(100.0, 100.0))
    avg = Amounts(sum(p.cpu for p in percents.values()) / n, sum(p.memory for p in percents.values()) / n)

    def clamp(x: float) -> float:
        return min(100.0, max(0.0, x))

    return Limits(
        Amounts(clamp(avg.cpu - low.cpu), clamp(avg.memory - low.memory)),
        Amounts(clamp(avg.cpu + high.cpu), clamp(avg.memory + high.memory)),
    )


def classify_node(pct: Amounts, limits: Limits) -> NodeClass:
    if any(pct.get(r) > limits.high.get(r) for r in RESOURCES):
        return "high"
    if all(pct.get(r) < limits.low.get(r) for r in RESOURCES):
        return "low"
    return "normal"


def over_resources(pct: Amounts, high: Amounts) -> tuple[str, ...]:
    """The resources over their high threshold, the one furthest over first."""
    over = [(pct.get(r) - high.get(r), r) for r in RESOURCES if pct.get(r) > high.get(r)]
    return tuple(r for _, r in sorted(over, key=lambda x: (-x[0], x[1])))
