"""The planner writes a node only when crane would otherwise read something else before the next cycle:
a value about to expire, a real move (min_change, min_interval), a predicate crossing, a hot value change."""

from __future__ import annotations

import pytest

from controller import load_annotations as ann
from controller.annotator import MAX_POLLING_INTERVAL, REFRESH_MARGIN, Annotator, write_margin
from controller.policy import default_policy
from controller.poller import AgentSample
from controller.scoring import EXTRA_ACTIVE_PERIOD, HOT_VALUE_ACTIVE_PERIOD, Scorer

NOW = 1795341600.0  # 2026-11-22T10:00:00Z
METRICS = tuple(s.name for s in default_policy().spec.sync_policy)


def _annotator(interval: float = 30.0, **kw: float) -> Annotator:
    return Annotator(Scorer(default_policy().spec), interval=interval, **kw)


def _hot_written(annotator: Annotator, hot: float, hot_age: float, want: int, gap: float | None = None) -> set[str]:
    """Keys planned for a node whose agent failed this cycle and whose hot value is `hot`, `hot_age` old."""
    current = {ann.HOT_VALUE: ann.format_value(hot, NOW - hot_age)}
    current[ann.LOAD_SCORE] = ann.format_score(annotator.scorer.evaluate("n1", annotator.scorer.parse(current), NOW).score, NOW - 1)  # fmt: skip
    return set(annotator.plan("n1", current, None, want, NOW, gap=gap))


def _sample(value: float, at: float = NOW) -> AgentSample:
    return AgentSample("n1", at, dict.fromkeys(METRICS, value), None)


def _written(annotator: Annotator, published: float, age: float, value: float) -> set[str]:
    """Keys planned when every metric was published as `published` `age` seconds ago and now reads `value`."""
    current = {m: ann.format_value(published, NOW - age) for m in METRICS}
    merged = {**current, ann.HOT_VALUE: ann.format_value(0, NOW - 1000)}
    score = annotator.scorer.evaluate("n1", annotator.scorer.parse(merged), NOW).score
    current[ann.LOAD_SCORE] = ann.format_score(score, NOW - age)
    return set(annotator.plan("n1", current, _sample(value), 0, NOW))


def test_a_zero_hot_value_is_never_refreshed() -> None:
    """crane reads an expired node_hot_value as 0: a published 0 needs no renewal, fresh or not."""
    annotator = _annotator()
    assert _hot_written(annotator, 0, 100, 0) == set()
    assert _hot_written(annotator, 0, 10_000, 0) == set()


def test_a_nonzero_hot_value_is_renewed_before_it_expires() -> None:
    annotator = _annotator()
    renew_at = HOT_VALUE_ACTIVE_PERIOD - 30 - REFRESH_MARGIN  # 210 s: the next cycle might come too late
    assert annotator.refresh() == renew_at
    assert _hot_written(annotator, 2, renew_at - 1, 2) == set()
    assert _hot_written(annotator, 2, renew_at, 2) == {ann.HOT_VALUE, ann.LOAD_SCORE}
    assert _hot_written(annotator, 2, 10, 3) == {ann.HOT_VALUE, ann.LOAD_SCORE}  # changed: at once
    assert _hot_written(annotator, 2, 10, 0) == {ann.HOT_VALUE, ann.LOAD_SCORE}  # back to 0 while 2 is read


def test_overrunning_cycles_renew_earlier() -> None:
    annotator = _annotator()
    assert annotator.refresh(gap=150) == HOT_VALUE_ACTIVE_PERIOD - 150 - REFRESH_MARGIN
    assert annotator.refresh(gap=10) == annotator.refresh()  # never later than with the interval itself
    assert annotator.refresh(gap=400) == 0  # hopeless: rewrite every cycle
    assert _hot_written(annotator, 1, 90, 1, gap=150) == {ann.HOT_VALUE, ann.LOAD_SCORE}


@pytest.mark.parametrize("interval", [1.0, 30.0, 120.0, 200.0, MAX_POLLING_INTERVAL - 0.5])
def test_the_hot_value_is_renewed_before_crane_stops_trusting_it(interval: float) -> None:
    annotator = _annotator(interval)
    # Worst case: just short of the refresh age at one cycle, renewed one interval later, landing a
    # margin after that: still within crane's 300 s.
    assert annotator.refresh() + interval + REFRESH_MARGIN <= HOT_VALUE_ACTIVE_PERIOD


def test_steady_metrics_are_renewed_just_before_they_expire() -> None:
    annotator = _annotator()
    expiry = 180 + EXTRA_ACTIVE_PERIOD  # the 5m windows: period 3m + crane's 5 minutes
    renew_at = expiry - 30 - REFRESH_MARGIN
    assert _written(annotator, 0.3, renew_at - 1, 0.3) == set()
    assert _written(annotator, 0.3, renew_at, 0.3) == {*METRICS, ann.HOT_VALUE, ann.LOAD_SCORE}


def test_noise_is_not_written_a_move_is_after_min_interval() -> None:
    annotator = _annotator(min_change=0.02, min_interval=60)  # not the defaults: the rule, not the numbers
    assert _written(annotator, 0.30, 100, 0.315) == set()  # below min_change
    assert _written(annotator, 0.30, 59, 0.33) == set()  # a move, but written 59 s ago
    assert _written(annotator, 0.30, 60, 0.33) == {*METRICS, ann.HOT_VALUE, ann.LOAD_SCORE}
    assert _written(annotator, 0.30, 60, 0.28) == {*METRICS, ann.HOT_VALUE, ann.LOAD_SCORE}  # both directions
    assert _written(_annotator(min_change=0, min_interval=0), 0.30, 1, 0.30001) != set()  # 0: every change


def test_a_predicate_crossing_is_written_at_once() -> None:
    annotator = _annotator(min_change=0.5, min_interval=600)
    # the default policy filters a node whose cpu_usage_avg_5m is above 0.65
    assert _written(annotator, 0.645, 1, 0.655) == {*METRICS, ann.HOT_VALUE, ann.LOAD_SCORE}
    assert _written(annotator, 0.655, 1, 0.645) == {*METRICS, ann.HOT_VALUE, ann.LOAD_SCORE}
    assert _written(annotator, 0.66, 1, 0.70) == set()  # stays above: no news for the filter


def test_missing_or_unreadable_metrics_are_written() -> None:
    annotator = _annotator()
    assert set(annotator.plan("n1", {}, _sample(0.3), 0, NOW)) == {*METRICS, ann.HOT_VALUE, ann.LOAD_SCORE}
    current = {m: ann.format_value(0.3, NOW - 1) for m in METRICS}
    current["cpu_usage_avg_5m"] = "0.3"  # no time stamp: crane ignores it
    assert ann.HOT_VALUE in annotator.plan("n1", current, _sample(0.3), 0, NOW)  # rides along with the metrics


def test_write_margin_grows_with_the_cluster_up_to_the_bound() -> None:
    assert write_margin(2.0, 10, 100) == pytest.approx(7.1)
    assert write_margin(2.0, 6000, 100) == REFRESH_MARGIN  # 60 s of queue + 7: capped
