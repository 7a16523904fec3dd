"""The Volcano agent's `extend` oversubscription policy (volcano-sh/volcano
pkg/agent/oversubscription/policy/extend/extend.go, defaults in cmd/agent/app/options/options.go):

    cpu    = max(0, (allocatable − Σ Guaranteed pods' cpu requests − usage) × ratio / 100)
    memory = max(0, (allocatable − usage) × ratio / 100)

with the default `--oversubscription-ratio` 60 and usage of all pods (system usage left out by default,
`--include-system-usage=false`). Smoothing: every 10 s a value is queued and the published one is the average
of the last 10 weighted 1, 2, 4, …, 512, newest heaviest (pkg/agent/events/probes/noderesources); those 100 s
fall within one 300 s trace step, where usage is one sample, so the smoothing leaves the step's value as is.
Trace pods carry no QoS class: none is counted Guaranteed.
"""

from __future__ import annotations

import numpy as np

from colo_sim.policies import Lending
from colo_sim.timeline import NodeTrace, Timeline

RATIO_PERCENT = 60


def run(node: NodeTrace, timeline: Timeline) -> dict[str, Lending]:
    out = []
    for resource in ("cpu", "memory"):
        usage = np.asarray(node.sums(resource)[0], np.float64)
        alloc = node.allocatable(resource)
        out.append(np.maximum(0.0, (alloc - usage) * RATIO_PERCENT / 100.0))
    return {"volcano": (out[0], out[1])}
