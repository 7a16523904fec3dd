"""`time_of_day`: daily batch runs and business hours repeat, so the node's online peak over the coming hour is
taken from the same hours of the last days: the highest 5-minute average of this hour of the day and the next
one over the last 7 days (`profile_days`) (the hourly maxima the windows keep for the node's series, a week at
most), raised by 10 % (`profile_margin`), or the last hour's peak (`max_avg_1h`) if higher. Until one day of the
profile is known: the `node_peak` predictor."""

from __future__ import annotations

from agent.capacity.predictors import node_peak
from agent.capacity.predictors.registry import Prediction, Reading, register, window_peak
from agent.windows.store import online_key


def predict(r: Reading) -> Prediction:
    key = online_key(r.resource)
    profile, days = r.windows.day_profile(key, r.now, r.params.profile_days)
    fallback = node_peak.predict(r)
    if profile is None or days < 1:
        return fallback
    recent, _ = window_peak(r.windows, key, r.now, "max_avg_1h")
    peak = profile * (1.0 + r.params.profile_margin)
    return Prediction(peak if recent is None else max(peak, recent), fallback.history)


register("time_of_day", predict, order=60)
