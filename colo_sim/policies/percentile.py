"""Resource-Central-like per-pod percentile predictor of Bashir et al., "Take it to the limit: peak
prediction-driven resource overcommitment in datacenters" (EuroSys 2021), as the agent implements it
(`agent.capacity.predictors.rc_like`: Σ each pod's p99 of the hour) and replayed through the agent's code; lent
as the paper lends: max(0, allocatable − peak) (`colo_sim.policies.colo.paper`).
"""

from __future__ import annotations

from colo_sim.policies import Lending, colo
from colo_sim.timeline import NodeTrace, Timeline


def run(node: NodeTrace, timeline: Timeline) -> dict[str, Lending]:
    return colo.run_paper(node, timeline, {"percentile": "rc_like"})
