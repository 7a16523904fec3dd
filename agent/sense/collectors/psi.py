"""The `psi` collector (pod scope): each pod's pressure stall 10 s averages, where the kernel has PSI and the
pod a directory on the unified hierarchy (v2, or a hybrid host's unified tree)."""

from __future__ import annotations

from collections.abc import Sequence

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.node import pressure_ratios
from agent.sense.collectors.registry import KeepsNothing, register
from agent.snapshot import PodSample, Pressure
from common.exposition import LabelShapes
from common.families import Family, FamilyLines, PutLine

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
        path, read = ctx.pod.path, ctx.pod_psi
        for res in self.resources:
            reading = read[res] = self.reader.psi(path, res)  # the run_queue collector's totals too
            if reading is not None and (p := pressure_ratios(reading.avg10)) is not None:
                pressure[res] = p
        if not pressure and not self.is_v2:
            self.active = False  # hybrid host whose pods have no directory on the unified tree
        return pressure


def _store(sample: PodSample, part: dict[str, Pressure]) -> None:
    sample.pressure = part


def _series(put: PutLine, lines: Sequence[FamilyLines], labels: LabelShapes, pod: PodSample) -> None:
    if pod.pressure:
        (pressure,) = lines
        tmpl = labels.template(("kind", "resource"))
        for res, p in sorted(pod.pressure.items()):
            put(pressure, tmpl % ("some", res), p.some_avg10)
            put(pressure, tmpl % ("full", res), p.full_avg10)


register(
    "psi",
    True,
    PsiCollector,
    store=_store,
    order=50,
    scope="pod",
    families=(PRESSURE,),
    pod_series=_series,
    what="Pressure stall information of the node and of every pod (where the kernel has it).",
)
