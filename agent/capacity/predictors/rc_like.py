"""`rc_like`: Bashir et al.'s Resource-Central-like predictor (EuroSys 2021, the per-VM percentile predictor of
their simulator): Σ over the online pods of each pod's 99th percentile over the last hour (`p99_1h`, of the
pod's per-minute means; the paper takes 2 hours of 5-minute samples capped at the request). A pod with less
history than `min_history_seconds` (over the day: `registry.history`) counts max(request, usage)."""

from __future__ import annotations

from agent.capacity.predictors.registry import HISTORY_WINDOW, Prediction, Reading, pod_key, register, seen_seconds
from agent.windows.grid import WINDOW_SPANS

#: What it reads of each pod's series: the percentile and the day behind it (`registry.history`'s windows), and
#: the current 5-minute average only where the day alone is too short a history (the larger of the two counts).
_READ = ("p99_1h", HISTORY_WINDOW)
_NOW = ("avg_5m",)
_DAY_SPAN = WINDOW_SPANS[HISTORY_WINDOW]


def predict(r: Reading) -> Prediction:
    total = 0.0
    windows, now, enough = r.windows, r.now, r.params.min_history_seconds
    pods = r.pods
    resource = r.resource
    keys = [pod_key(p.uid, resource) for p in pods]
    for p, key, (p99, day) in zip(pods, keys, windows.values_of(keys, _READ, now), strict=True):
        value = p99.value
        if value is not None and day.coverage * _DAY_SPAN < enough:  # (`seen_seconds`' first term)
            (avg5,) = windows.values(key, _NOW, now)
            if seen_seconds(HISTORY_WINDOW, day, avg5) < enough:
                value = None
        total += max(p.request, p.usage) if value is None else value
    return Prediction(total, float("inf"))  # each pod's own history is weighed above


register("rc_like", predict, order=40, per_pod=True)
