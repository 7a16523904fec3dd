"""The `tiers` collector: CPU and working set of the QoS tier cgroups (kubepods, burstable, besteffort).

Guaranteed pods live in kubepods itself, which also holds the other two tiers: the guaranteed figures are
kubepods minus those, floored at zero."""

from __future__ import annotations

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import KeepsNothing, register
from agent.snapshot import Snapshot, TierSample, qos_label
from cgroup import QOS_CLASSES, CgroupError, QoS
from common.families import Families, Family

CPU_USAGE = Family("colo_qos_cpu_usage_cores", "CPU cores used by a QoS tier's cgroup.")
WORKING_SET = Family("colo_qos_memory_working_set_bytes", "Working set of a QoS tier's cgroup.")


class TiersCollector(KeepsNothing):
    def __init__(self, deps: CollectorDeps) -> None:
        self.reader, self.cpu_rates = deps.reader, deps.cpu_rates
        self.paths = {qos: deps.model.tier(qos) for qos in QOS_CLASSES}

    def collect(self, ctx: PassContext) -> dict[str, TierSample]:
        read: dict[QoS, tuple[float | None, int]] = {}
        for qos, path in self.paths.items():
            try:
                cpu = self.reader.cpu(path)
                cores, _ = self.cpu_rates.rate(path, ctx.now, cpu.usage_ns, cpu.nr_periods, cpu.nr_throttled)
                read[qos] = (cores, self.reader.memory(path).working_set_bytes)
                if qos == "guaranteed":  # kubepods itself: the pods collector's root, not read twice
                    ctx.kubepods = (cpu.usage_ns, read[qos][1])
            except CgroupError:
                continue  # no kubelet on this machine, or the tier is not there yet
            ctx.seen.add(path)
        if "guaranteed" in read:
            cores, ws = read["guaranteed"]
            for sub in QOS_CLASSES[1:]:
                sub_cores, sub_ws = read.get(sub, (0.0, 0))
                cores = None if cores is None or sub_cores is None else cores - sub_cores
                ws -= sub_ws
            read["guaranteed"] = (None if cores is None else max(0.0, cores), max(0, ws))
        return {qos: TierSample(qos, self.paths[qos], c, w) for qos, (c, w) in read.items()}


def _series(f: Families, snap: Snapshot, nl: dict[str, str]) -> None:
    for tier in sorted(snap.tiers.values(), key=lambda t: t.qos):
        ql = {"qos": qos_label(tier.qos)}
        f.add(CPU_USAGE, ql, tier.cpu_cores)
        f.add(WORKING_SET, ql, tier.memory_working_set_bytes)


register(
    "tiers",
    True,
    TiersCollector,
    fills="tiers",
    order=20,
    families=(CPU_USAGE, WORKING_SET),
    metrics_order=70,  # in /metrics after the node's windows, network and disks
    node_series=_series,
    what="The QoS tier cgroups (guaranteed, burstable, besteffort).",
)
