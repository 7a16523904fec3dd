"""`max`: the larger of `nsigma` and `rc_like`, Bashir et al.'s max(predictors) (EuroSys 2021)."""

from __future__ import annotations

from agent.capacity.predictors import nsigma, rc_like
from agent.capacity.predictors.registry import Prediction, Reading, register


def predict(r: Reading) -> Prediction:
    a, b = nsigma.predict(r), rc_like.predict(r)
    return Prediction(max(a.peak, b.peak), min(a.history, b.history))


register("max", predict, order=50, per_pod=True)
