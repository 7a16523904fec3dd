"""The pure strategies, by tables: no cgroup, no API server, no clock."""

from __future__ import annotations

import pytest

from agent.node_state import Usage
from agent.strategies import eviction_choice, memory_high, release
from tests.test_capacity import GI, sample


@pytest.mark.parametrize(
    ("load", "released", "below", "expected"),
    [
        (0.2, False, 0.3, True),  # quiet: released
        (0.35, True, 0.3, True),  # between the two thresholds: stays released
        (0.35, False, 0.3, False),  # ... and stays suppressed
        (0.41, True, 0.3, False),  # above below + 0.1: suppressed again
        (0.4, True, 0.3, True),  # exactly at the hysteresis bound: unchanged
        (0.0, False, 0.0, False),  # 0 disables release
        (0.0, True, 0.0, False),
    ],
)
def test_release_with_hysteresis(load: float, released: bool, below: float, expected: bool) -> None:
    assert release.plan(load, released, below) is expected


@pytest.mark.parametrize(
    ("online", "system", "high", "sizes", "expected"),
    [
        # 16 GiB allocatable, 60%: 9.6 GiB; online 4, system 2 -> 3.6 GiB split 1:3 by working set
        (4 * GI, 2 * GI, 60, (GI, 3 * GI), (int(3.6 * GI) // 4, int(3.6 * GI) * 3 // 4)),
        # nothing left: each pod still gets the floor
        (9 * GI, 2 * GI, 60, (GI, GI), (64 << 20, 64 << 20)),
    ],
)
def test_memory_high_split(
    online: int, system: int, high: int, sizes: tuple[int, int], expected: tuple[int, int]
) -> None:
    pods = [sample(f"p{i}", "offline", 0, 0, 0.1, size) for i, size in enumerate(sizes)]
    memory = Usage(16.0 * GI, float(online + system + sum(sizes)), float(online + sum(sizes)), float(online),
                   float(sum(sizes)))  # fmt: skip
    plan = memory_high.plan(memory, pods, high, 64 << 20)
    assert (plan["p0"], plan["p1"]) == pytest.approx(expected, abs=1)


def test_eviction_choice_orders_and_stops_at_the_watermark() -> None:
    pods = [
        sample("low-prio-small", "offline", 0, 0, 0.5, GI),
        sample("low-prio-big", "offline", 0, 0, 2.0, GI),
        sample("high-prio", "offline", 0, 0, 4.0, GI),
    ]
    object.__setattr__(pods[2].meta, "priority", 100)
    # 8 cores, usage 90% of allocatable, high watermark 80%: the big low-priority pod (25%) is enough
    victims, order, projected = eviction_choice.plan(pods, "cpu", 90.0, 8.0, 80, 2)
    assert [p.uid for p in order] == ["low-prio-big", "low-prio-small", "high-prio"]
    assert [p.uid for p in victims] == ["low-prio-big"] and projected == pytest.approx(65.0)
    victims, _, _ = eviction_choice.plan(pods, "cpu", 99.0, 8.0, 50, 2)  # far above: capped at 2 per round
    assert [p.uid for p in victims] == ["low-prio-big", "low-prio-small"]
