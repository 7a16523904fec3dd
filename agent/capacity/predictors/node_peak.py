"""`node_peak` (the default): the peak window (`peak_window`, a day's highest 5-minute average by default) of
the node's online usage, one series (all pods' − offline pods'), or its current 5-minute average if higher.
Peaks of different pods rarely coincide: the node's peak is what they take together. Without
`min_history_seconds` of history: Σ max(request, usage) of the online pods."""

from __future__ import annotations

from agent.capacity.predictors.registry import Prediction, Reading, register, requested, window_peak
from agent.windows.store import online_key


def predict(r: Reading) -> Prediction:
    peak, history = window_peak(r.windows, online_key(r.resource), r.now, r.params.peak_window)
    if peak is None or history < r.params.min_history_seconds:
        return Prediction(requested(r.pods), history)
    return Prediction(peak, history)


register("node_peak", predict, order=10)
