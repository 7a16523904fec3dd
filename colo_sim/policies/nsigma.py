"""N-sigma peak predictor of Bashir et al., "Take it to the limit: peak prediction-driven resource
overcommitment in datacenters" (EuroSys 2021), as its authors' simulator implements it
(googleinterns/cluster-resource-forecast, simulator/n_sigma_predictor.py; parameters from its documented
configuration, docs/experiments/running-predictors.md): per node, the history of the last 24 samples
(5-minute samples: 2 hours) of u = Σ min(usage, request) / Σ request over the pods present (usage capped at
the request, `cap_to_limit`); the predicted peak is min(1, mean(u) + N × stdev(u)) × Σ request now, N = 5.
With fewer than 24 samples (`min_num_samples`) the peak is Σ request (nothing lent). Lent:
max(0, allocatable − peak).
"""

from __future__ import annotations

import math
from collections import deque

from colo_sim.timeline import NodeTrace

N = 5.0
HISTORY = 24


def peaks(node: NodeTrace, resource: str) -> list[float]:
    """The predicted peak at every step."""
    ri, ui = (1, 2) if resource == "cpu" else (3, 4)
    history: deque[float] = deque(maxlen=HISTORY)
    out = []
    for step in node.present:
        request = math.fsum(p[ri] for p in step)
        if step:
            used = math.fsum(min(p[ui], p[ri]) for p in step)
            history.append(used / request if request > 0 else 0.0)
        if len(history) < HISTORY:
            out.append(request)
            continue
        mean = math.fsum(history) / HISTORY
        sd = math.sqrt(math.fsum((x - mean) ** 2 for x in history) / (HISTORY - 1))
        out.append(min(1.0, mean + N * sd) * request)
    return out
