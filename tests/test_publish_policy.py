"""The publishing rules as pure decisions (agent/capacity/publish_rules.py, docs/publishing.md)."""

from __future__ import annotations

import pytest

from agent.capacity.publish_rules import Band, WindowMean, floored, should_write

BAND = Band(fraction=0.1, min_interval=60.0)

#: (old, new, since_last_write, shrink_now, floor) -> written?
CASES = [
    (None, 0, 1.0, False, 0, True),  # absent: written at once
    (1000, 1000, 999.0, False, 0, False),  # unchanged
    (1000, 1050, 999.0, False, 0, False),  # within the band: never, however long ago
    (1000, 950, 999.0, False, 0, False),  # ... in both directions
    (1000, 1200, 30.0, False, 0, False),  # outside, within the minimum interval
    (1000, 1200, 60.0, False, 0, True),  # outside, interval passed
    (1000, 800, 30.0, False, 0, False),  # a drop, not for safety: waits
    (1000, 800, 30.0, True, 0, True),  # a drop for safety: at once
    (1000, 1200, 30.0, True, 0, False),  # safety hurries drops only
    (1000, 990, 1.0, True, 0, True),  # ... even within the band
    (1000, 2500, 1.0, False, 2500, True),  # the node carries less than the floor: at once
    (2500, 2600, 1.0, False, 2500, False),  # at the floor, a small rise waits
    (1000, 1200, None, False, 0, True),  # no write yet by this agent
]


@pytest.mark.parametrize(("old", "new", "since", "shrink_now", "floor", "written"), CASES)
def test_should_write(old: int | None, new: int, since: float | None, shrink_now: bool, floor: int,
                      written: bool) -> None:  # fmt: skip
    assert should_write(old, new, BAND, since_last_write=since, shrink_now=shrink_now, floor=floor) is written


def test_window_mean_forgets_what_left_the_window() -> None:
    w = WindowMean(3.0)
    assert [w.add(t, v) for t, v in ((0.0, 300), (1.0, 0), (2.0, 300), (3.0, 300), (4.0, 300))] == [
        300, 150, 200, 200, 300]  # fmt: skip
    w.clear()
    assert w.add(5.0, 7) == 7


def test_floored_is_per_resource() -> None:
    assert floored({"cpu": 1200, "memory": 8}, {"cpu": 2500, "memory": 4}) == {"cpu": 2500, "memory": 8}
    assert floored({"cpu": 0, "memory": 0}, {}) == {"cpu": 0, "memory": 0}
