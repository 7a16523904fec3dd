"""The paper's max(predictors) (Bashir et al., EuroSys 2021): the node's peak is the larger of the N-sigma and
the per-pod percentile predictions (`agent.capacity.predictors.max_of_paper`), replayed through the agent's
code; this runner reports the three paper policies at once (`nsigma`, `percentile`, `max`), or those asked, from one
replay.
"""

from __future__ import annotations

from colo_sim.policies import Lending, colo
from colo_sim.timeline import NodeTrace, Timeline

#: The paper's policies and the agent's predictor each is.
PAPER = {"nsigma": "nsigma", "percentile": "rc_like", "max": "max"}


def run(node: NodeTrace, timeline: Timeline, policies: tuple[str, ...] = tuple(PAPER)) -> dict[str, Lending]:
    """The paper's `policies` (all three by default) from one replay."""
    return colo.run_paper(node, timeline, {name: PAPER[name] for name in policies})
