"""The paper's max(predictors) (Bashir et al., EuroSys 2021): the node's peak is the larger of the N-sigma and
the per-pod percentile predictions (`agent.capacity.predictors.max_of_paper`), replayed through the agent's
code; this runner reports the three paper policies at once (`nsigma`, `percentile`, `max`), from one replay.
"""

from __future__ import annotations

from colo_sim.policies import Lending, colo
from colo_sim.timeline import NodeTrace, Timeline


def run(node: NodeTrace, timeline: Timeline) -> dict[str, Lending]:
    return colo.run_paper(node, timeline, {"nsigma": "nsigma", "percentile": "rc_like", "max": "max"})
