"""Resource-Central-like per-pod percentile predictor of Bashir et al., "Take it to the limit: peak
prediction-driven resource overcommitment in datacenters" (EuroSys 2021), after its authors' simulator
(googleinterns/cluster-resource-forecast, simulator/per_vm_percentile_predictor.py): the node's peak is the
sum over its pods of the 99th percentile (linear interpolation, numpy's default) of each pod's last 24
samples of usage capped at its request (2 hours of 5-minute samples, the history length of the paper's
N-sigma configuration; the simulator leaves the percentile a parameter, p99 is our choice for a
peak predictor). A pod with fewer than 24 samples counts its request. Lent: max(0, allocatable − peak).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque

from colo_sim.timeline import NodeTrace

PERCENTILE = 0.99
HISTORY = 24
_H = (HISTORY - 1) * PERCENTILE
_I = int(_H)
_F = _H - _I


def peaks(node: NodeTrace, resource: str) -> list[float]:
    """The predicted peak at every step."""
    ri, ui = (1, 2) if resource == "cpu" else (3, 4)
    recent: list[deque[float]] = [deque() for _ in node.pods]
    ordered: list[list[float]] = [[] for _ in node.pods]
    out = []
    for step in node.present:
        total = 0.0
        for p in step:
            i, request = p[0], p[ri]
            value = min(p[ui], request)
            window, sorted_values = recent[i], ordered[i]
            window.append(value)
            insort(sorted_values, value)
            if len(window) > HISTORY:
                del sorted_values[bisect_left(sorted_values, window.popleft())]
            if len(window) < HISTORY:
                total += request
            else:
                lo = sorted_values[_I]
                total += lo + _F * (sorted_values[_I + 1] - lo)
        out.append(total)
    return out
