"""The paper's max(predictors) (Bashir et al., EuroSys 2021): the node's peak is the larger of the N-sigma
and the per-pod percentile predictions (`colo_sim.policies.nsigma`, `colo_sim.policies.percentile`); all
three are lent as max(0, allocatable − peak), so this runner reports the three at once.
"""

from __future__ import annotations

from colo_sim.policies import Lending, nsigma, percentile
from colo_sim.timeline import NodeTrace, Timeline


def run(node: NodeTrace, timeline: Timeline) -> dict[str, Lending]:
    out: dict[str, tuple[list[float], ...]] = {"nsigma": (), "percentile": (), "max": ()}
    for resource in ("cpu", "memory"):
        alloc = node.allocatable(resource)
        sigma = nsigma.peaks(node, resource)
        pct = percentile.peaks(node, resource)
        out["nsigma"] += ([max(0.0, alloc - p) for p in sigma],)
        out["percentile"] += ([max(0.0, alloc - p) for p in pct],)
        out["max"] += ([max(0.0, alloc - max(a, b)) for a, b in zip(sigma, pct, strict=True)],)
    return {name: (v[0], v[1]) for name, v in out.items()}
