"""`rc_like`: Bashir et al.'s Resource-Central-like predictor (EuroSys 2021, the per-VM percentile predictor of
their simulator): Σ over the online pods of each pod's 99th percentile over the last hour (`p99_1h`, of the
pod's per-minute means; the paper takes 2 hours of 5-minute samples capped at the request). A pod with less
history than `min_history_seconds` (over the day: `registry.history`) counts max(request, usage)."""

from __future__ import annotations

from agent.capacity.predictors.registry import HISTORY_WINDOW, Prediction, Reading, pod_key, register, seen_seconds

#: What it reads of each pod's series: the percentile, and the history behind it (`registry.history`'s windows).
_READ = ("p99_1h", HISTORY_WINDOW, "avg_5m")


def predict(r: Reading) -> Prediction:
    total = 0.0
    windows, now, enough = r.windows, r.now, r.params.min_history_seconds
    for p in r.pods:
        p99, day, avg5 = windows.values(pod_key(p.uid, r.resource), _READ, now)
        if p99.value is None or seen_seconds(HISTORY_WINDOW, day, avg5) < enough:
            total += max(p.request, p.usage)
        else:
            total += p99.value
    return Prediction(total, float("inf"))  # each pod's own history is weighed above


register("rc_like", predict, order=40, per_pod=True)
