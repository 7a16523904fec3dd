"""The `psi` collector (pod scope): each pod's pressure stall 10 s averages, where the kernel has PSI and the
pod a directory on the unified hierarchy (v2, or a hybrid host's unified tree)."""

from __future__ import annotations

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.node import pressure_ratios
from agent.sense.collectors.registry import KeepsNothing, register
from agent.snapshot import Pressure
from common.families import Family

PRESSURE = Family("colo_pod_pressure_ratio", "Pod PSI 10 s average (0-1).")


class PsiCollector(KeepsNothing):
    def __init__(self, deps: CollectorDeps) -> None:
        self.reader, self.resources, self.is_v2 = deps.reader, deps.psi_resources, deps.layout.is_v2
        self.active = deps.layout.unified is not None and bool(self.resources)

    def collect(self, ctx: PassContext) -> dict[str, Pressure]:
        pressure: dict[str, Pressure] = {}
        if not self.active:
            return pressure
        assert ctx.pod is not None
        for res in self.resources:
            p = pressure_ratios(self.reader.psi_avg10(ctx.pod.path, res))
            if p is not None:
                pressure[res] = p
        if not pressure and not self.is_v2:
            self.active = False  # hybrid host whose pods have no directory on the unified tree
        return pressure


register(
    "psi",
    True,
    PsiCollector,
    fills="pressure",
    order=50,
    scope="pod",
    what="Pressure stall information of the node and of every pod (where the kernel has it).",
)
