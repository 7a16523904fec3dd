"""`rc_like`: Bashir et al.'s Resource-Central-like predictor (EuroSys 2021, the per-VM percentile predictor of
their simulator): Σ over the online pods of each pod's 99th percentile over the last hour (`p99_1h`, of the
pod's per-minute means; the paper takes 2 hours of 5-minute samples capped at the request). A pod with less
history than `min_history_seconds` counts max(request, usage)."""

from __future__ import annotations

from agent.capacity.predictors.registry import Prediction, Reading, pod_key, register, seen_seconds
from agent.windows.grid import WINDOW_SPANS

#: What it reads of each pod's series: the percentile, whose coverage is the hour's (`max_avg_1h`'s, the history
#: `registry.history` weighs), and, only where the hour alone is too short a history, the current 5-minute average.
_HOUR = ("p99_1h",)
_NOW = ("avg_5m",)
_HOUR_SPAN = WINDOW_SPANS["p99_1h"]


def predict(r: Reading) -> Prediction:
    total = 0.0
    windows, now, enough = r.windows, r.now, r.params.min_history_seconds
    pods = r.pods
    resource = r.resource
    keys = [pod_key(p.uid, resource) for p in pods]
    for p, key, (p99,) in zip(pods, keys, windows.values_of(keys, _HOUR, now), strict=True):
        value = p99.value
        # seen_seconds is the larger of the hour's and the 5-minute average's: the hour's alone may decide
        if value is not None and p99.coverage * _HOUR_SPAN < enough:
            (avg5,) = windows.values(key, _NOW, now)
            if seen_seconds("p99_1h", p99, avg5) < enough:
                value = None
        total += max(p.request, p.usage) if value is None else value
    return Prediction(total, float("inf"))  # each pod's own history is weighed above


register("rc_like", predict, order=40, per_pod=True)
