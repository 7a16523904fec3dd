"""`week_peak`: the highest 5-minute average of the node's online usage over the last 7 days (`profile_days`; the
hourly maxima the windows keep, a week at most), or `node_peak`'s if higher. Memory that an idle node's pods
took a few days ago they may take again (on the shared trace a day's peak misses such returns: docs/simulation.md);
until the hourly maxima hold anything: `node_peak`."""

from __future__ import annotations

from agent.capacity.predictors import node_peak
from agent.capacity.predictors.registry import Prediction, Reading, register
from agent.windows.store import online_key


def predict(r: Reading) -> Prediction:
    day = node_peak.predict(r)
    week = r.windows.days_peak(online_key(r.resource), r.now, r.params.profile_days)
    if week is None or week <= day.peak:
        return day
    return Prediction(week, day.history)


register("week_peak", predict, order=70)
