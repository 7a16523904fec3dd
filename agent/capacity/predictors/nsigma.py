"""`nsigma`: Bashir et al.'s N-sigma predictor ("Take it to the limit: peak prediction-driven resource
overcommitment in datacenters", EuroSys 2021): mean + N·σ (`nsigma`, 5 as in the paper's configuration) of the
node's online usage over the last hour, taken over the hour's per-minute means the windows keep (at colo-sim's
300 s steps: the hour's 5-minute samples, as the paper's 5-minute samples), or the current 5-minute average if
higher. The paper's simulator takes the node's usage as a share of its requests over 2 hours; here the usage
itself over the hour the windows keep. With fewer than two minutes' means, or less than `min_history_seconds` of
the series' history (over the day: `registry.history`), Σ max(request, usage)."""

from __future__ import annotations

import math

from agent.capacity.predictors.registry import HISTORY_WINDOW, Prediction, Reading, register, requested, seen_seconds
from agent.windows.store import online_key


def predict(r: Reading) -> Prediction:
    key = online_key(r.resource)
    means = r.windows.minute_means(key, r.now)
    day, avg5 = r.windows.values(key, (HISTORY_WINDOW, "avg_5m"), r.now)  # (`registry.history`'s, read once)
    seen = seen_seconds(HISTORY_WINDOW, day, avg5)
    if len(means) < 2 or seen < r.params.min_history_seconds:
        return Prediction(requested(r.pods), seen)
    mean = math.fsum(means) / len(means)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in means) / (len(means) - 1))
    now5 = avg5.value
    peak = mean + r.params.nsigma * sd
    return Prediction(peak if now5 is None else max(peak, now5), seen)


register("nsigma", predict, order=30)
