"""`rc_like`: Bashir et al.'s Resource-Central-like predictor (EuroSys 2021, the per-VM percentile predictor of
their simulator): Σ over the online pods of each pod's 99th percentile over the last hour (`p99_1h`, of the
pod's per-minute means; the paper takes 2 hours of 5-minute samples capped at the request). A pod with less
history than `min_history_seconds` counts max(request, usage)."""

from __future__ import annotations

from agent.capacity.predictors.registry import Prediction, Reading, history, pod_key, register


def predict(r: Reading) -> Prediction:
    total = 0.0
    for p in r.pods:
        key = pod_key(p.uid, r.resource)
        p99 = r.windows.value(key, "p99_1h", r.now).value
        if p99 is None or history(r.windows, key, r.now, "max_avg_1h") < r.params.min_history_seconds:
            total += max(p.request, p.usage)
        else:
            total += p99
    return Prediction(total, float("inf"))  # each pod's own history is weighed above


register("rc_like", predict, order=40, per_pod=True)
