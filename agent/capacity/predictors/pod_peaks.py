"""`pod_peaks` (the rule before issue 20, kept to compare): Σ each online pod's own peak window with its current
5-minute average; a pod with less history than `min_history_seconds` counts max(request, usage). It lends only
what online pods requested and do not use, Σ max(0, request − peak), under both publishing models."""

from __future__ import annotations

from agent.capacity.predictors.registry import Prediction, Reading, pod_key, register, window_peak


def predict(r: Reading) -> Prediction:
    peaks = []
    for p in r.pods:
        peak, history = window_peak(r.windows, pod_key(p.uid, r.resource), r.now, r.params.peak_window)
        peaks.append(max(p.request, p.usage) if peak is None or history < r.params.min_history_seconds else peak)
    reclaimable = sum(max(0.0, p.request - peak) for p, peak in zip(r.pods, peaks, strict=True))
    return Prediction(sum(peaks), float("inf"), reclaimable)  # each pod's own history is weighed above


register("pod_peaks", predict, order=20, per_pod=True, requested_only=True)
