"""The publishing rules as pure decisions (agent/capacity/publish_rules.py, docs/publishing.md)."""

from __future__ import annotations

import pytest

from agent.capacity.publish_rules import Band, WindowMean, floored, proposed, should_write

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


def replay(computed: list[int], *, pressing: bool, published: int, rule: str = "proposed") -> list[int]:
    """One pass a second over a 60 s publish window already full of `published`: the values written."""
    window = WindowMean(60.0)
    for t in range(60):
        window.add(float(t), published)
    written: list[int] = []
    last_write = 0.0
    for i, value in enumerate(computed):
        t = 60.0 + i
        smoothed = window.add(t, value)
        new = proposed(smoothed, value, pressing) if rule == "proposed" else smoothed
        if should_write(published, new, BAND, since_last_write=t - last_write, shrink_now=pressing):
            written.append(new)
            published, last_write = new, t
    return written


def test_a_drop_under_pressure_goes_to_its_target_in_one_write() -> None:
    """The issue's drop: capacity computed 1274, then 1200 for good, the node under pressure. The window's mean
    trails down a little each second, and writing it at once wrote the node every pass (1274 → 1260 → …);
    the pass's own value is written once."""
    fall = [1200] * 30
    assert replay(fall, pressing=True, published=1274) == [1200]
    assert len(replay(fall, pressing=True, published=1274, rule="mean")) >= 6  # the old rule, step by step
    # without pressure nothing is urgent: the mean, within the band, is not written at all
    assert replay(fall, pressing=False, published=1274) == []
    # noise under pressure: only a new low is a drop (and a rise waits for the band and the interval)
    assert replay([1200, 1195, 1205, 1198, 1201, 1196], pressing=True, published=1274) == [1200, 1195]


def test_proposed_is_the_mean_but_under_pressure_never_above_the_pass() -> None:
    assert proposed(1260, 1200, pressing=False) == 1260
    assert proposed(1260, 1200, pressing=True) == 1200
    assert proposed(1200, 1260, pressing=True) == 1200, "a rise is never hurried"
