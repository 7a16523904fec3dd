"""Which offline pods to evict: lowest priority first, then highest usage of the resource under pressure,
then youngest; as many as bring the projected usage under the high watermark, at most `max_per_round`."""

from __future__ import annotations

from collections.abc import Iterable

from agent.node_state import Resource, pod_usage, watermark_usage
from agent.snapshot import PodSample


def victim_order(pods: Iterable[PodSample], resource: Resource) -> list[PodSample]:
    """Lowest priority first, then highest usage of the resource under pressure, then youngest."""
    return sorted(
        pods, key=lambda p: (p.meta.priority or 0, -pod_usage(p, resource), -(p.meta.creation_timestamp or 0.0))
    )


def plan(
    pods: list[PodSample], resource: Resource, usage_percent: float, allocatable: float, high: int, max_per_round: int
) -> tuple[list[PodSample], list[PodSample], float]:
    """(the pods to evict this round in order, every candidate in order, the projected usage in percent)."""
    order = victim_order(pods, resource)
    projected, wanted = usage_percent, 0
    for p in order:
        if projected < high or wanted >= max_per_round:
            break
        projected -= 100.0 * watermark_usage(p, resource) / allocatable  # what the watermark counted of it
        wanted += 1
    return order[:wanted], order, projected
