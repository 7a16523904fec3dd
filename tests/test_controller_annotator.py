"""The planner's refresh of `node_hot_value`: early enough for the next cycle to renew it before crane's 300 s."""

from __future__ import annotations

import pytest

from controller import annotations as ann
from controller.annotator import MAX_POLLING_INTERVAL, REFRESH_MARGIN, Annotator
from controller.policy import default_policy
from controller.scoring import HOT_VALUE_ACTIVE_PERIOD, Scorer

NOW = 1795341600.0  # 2026-11-22T10:00:00Z


def _written(annotator: Annotator, hot_age: float, gap: float | None = None) -> set[str]:
    """Keys planned for a node whose agent failed this cycle and whose hot value (0) is `hot_age` old."""
    current = {ann.HOT_VALUE: ann.format_value(0.0, NOW - hot_age), ann.LOAD_SCORE: ann.format_score(0, NOW - 1)}
    return set(annotator.plan("n1", current, None, 0, NOW, gap=gap))


def test_default_interval_keeps_the_shortest_period() -> None:
    annotator = Annotator(Scorer(default_policy().spec), interval=30)
    assert annotator.refresh() == 180  # 3m, crane's shortest sync period: 300 - 30 - 60 would allow 210
    assert _written(annotator, 179) == set()
    assert _written(annotator, 180) == {ann.HOT_VALUE, ann.LOAD_SCORE}


def test_a_long_polling_interval_rewrites_earlier() -> None:
    annotator = Annotator(Scorer(default_policy().spec), interval=200)
    assert annotator.refresh() == 40  # 300 - 200 - 60
    assert _written(annotator, 39) == set()
    assert _written(annotator, 40) == {ann.HOT_VALUE, ann.LOAD_SCORE}


def test_overrunning_cycles_rewrite_earlier() -> None:
    annotator = Annotator(Scorer(default_policy().spec), interval=30)
    assert annotator.refresh(gap=150) == 90  # the last cycle took 150 s: the next look is that far away
    assert annotator.refresh(gap=10) == 180  # never later than with the interval itself
    assert _written(annotator, 90, gap=150) == {ann.HOT_VALUE, ann.LOAD_SCORE}
    assert annotator.refresh(gap=400) == 0  # hopeless: rewrite every cycle


@pytest.mark.parametrize("interval", [1.0, 30.0, 120.0, 200.0, MAX_POLLING_INTERVAL - 0.5])
def test_the_value_is_renewed_before_crane_stops_trusting_it(interval: float) -> None:
    annotator = Annotator(Scorer(default_policy().spec), interval=interval)
    # Worst case: just short of the refresh age at one cycle, renewed one interval later, landing a
    # margin after that: still within crane's 300 s.
    assert annotator.refresh() + interval + REFRESH_MARGIN <= HOT_VALUE_ACTIVE_PERIOD
