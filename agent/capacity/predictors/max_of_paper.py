"""`max`: the larger of `nsigma` and `rc_like`, Bashir et al.'s max(predictors) (EuroSys 2021)."""

from __future__ import annotations

from agent.capacity.predictors import nsigma, rc_like  # noqa: F401 (registered before `max` reads them)
from agent.capacity.predictors.registry import Prediction, Reading, register
from agent.capacity.predictors.registry import predict as predicted


def predict(r: Reading) -> Prediction:
    a, b = predicted("nsigma", r), predicted("rc_like", r)
    return Prediction(max(a.peak, b.peak), min(a.history, b.history))


register("max", predict, order=50, per_pod=True)
