"""N-sigma peak predictor of Bashir et al., "Take it to the limit: peak prediction-driven resource
overcommitment in datacenters" (EuroSys 2021), as the agent implements it (`agent.capacity.predictors.nsigma`:
the hour's mean + 5σ of the node's online usage) and replayed through the agent's code; lent as the paper
lends: max(0, allocatable − peak), no cold-start rule, no learned margin (`colo_sim.policies.colo.paper`).
"""

from __future__ import annotations

from colo_sim.policies import Lending, colo
from colo_sim.timeline import NodeTrace, Timeline


def run(node: NodeTrace, timeline: Timeline) -> dict[str, Lending]:
    return colo.run_paper(node, timeline, {"nsigma": "nsigma"})
