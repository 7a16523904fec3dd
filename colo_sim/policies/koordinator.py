"""koordinator's batch allocatable, usage policy (koordinator's slo-controller, batchresource plugin):

    batch = max(0, capacity − capacity × (100 − reclaimThresholdPercent)/100 − system used − Σ online used)

i.e. capacity × reclaim% − system − online usage, with koordinator's defaults cpuReclaimThresholdPercent 60
and memoryReclaimThresholdPercent 65 (`DefaultColocationStrategy` in koordinator's pkg/util/sloconfig) and
usage averaged over metricAggregateDurationSeconds 300 s: at a 300 s trace step, the step's sample. Source:
koordinator-sh/koordinator pkg/slo-controller/noderesource/plugins/batchresource/util.go
(`calculateBatchResourceByPolicy`). System usage in a trace is 0 (allocatable = capacity: nothing reserved).
"""

from __future__ import annotations

import numpy as np

from colo_sim.policies import Lending
from colo_sim.timeline import NodeTrace, Timeline

CPU_RECLAIM_PERCENT = 60
MEMORY_RECLAIM_PERCENT = 65


def run(node: NodeTrace, timeline: Timeline) -> dict[str, Lending]:
    out = []
    for resource, percent in (("cpu", CPU_RECLAIM_PERCENT), ("memory", MEMORY_RECLAIM_PERCENT)):
        usage = np.asarray(node.sums(resource)[0], np.float64)
        top = node.allocatable(resource) * percent / 100.0
        out.append(np.maximum(0.0, top - usage))
    return {"koordinator": (out[0], out[1])}
