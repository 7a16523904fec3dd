"""The peak oracle (Bashir et al., "Take it to the limit: peak prediction-driven resource overcommitment in
datacenters", EuroSys 2021): it knows the future and lends what stays free over the horizon,

    L*(t) = max(0, allocatable − max of the node's online usage over [t, t + H)).

It is the yardstick of every other policy (`colo_sim.measures`); replayed as a policy it scores 1 and 0.
"""

from __future__ import annotations

import math

from colo_sim.measures import oracle_lend
from colo_sim.policies import Lending
from colo_sim.timeline import NodeTrace, Timeline


def width(horizon_s: float, step_s: float) -> int:
    """Steps in [t, t + H): at least one."""
    return max(1, math.ceil(horizon_s / step_s - 1e-9))


def lend(node: NodeTrace, timeline: Timeline, horizon_s: float) -> Lending:
    w = width(horizon_s, timeline.step)
    cpu = oracle_lend(node.sums("cpu")[0], node.cpu_cores, w)
    memory = oracle_lend(node.sums("memory")[0], node.memory_bytes, w)
    return cpu, memory
