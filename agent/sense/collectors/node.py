"""The `node` collector (always on): CPU, memory and PSI of the whole node from /proc; capacity, eviction and
enforcement decide on it."""

from __future__ import annotations

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import KeepsNothing, register
from agent.snapshot import NodeSample, Pressure, Snapshot
from common.families import Families, Family

CPU_CAPACITY = Family("colo_node_cpu_capacity_cores", "CPU cores the node has.")
CPU_USAGE = Family("colo_node_cpu_usage_cores", "Busy CPU cores of the node (not idle, iowait or steal).")
CPU_RATIO = Family("colo_node_cpu_usage_ratio", "Busy CPU of the node over its capacity (0-1).")
MEMORY_TOTAL = Family("colo_node_memory_total_bytes", "MemTotal of the node.")
MEMORY_USED = Family("colo_node_memory_used_bytes", "MemTotal - MemAvailable of the node.")
PAGE_CACHE = Family("colo_node_memory_page_cache_bytes", "Page cache of the node.")
MEMORY_RATIO = Family("colo_node_memory_usage_ratio", "Used over total memory of the node (0-1).")
PRESSURE = Family("colo_node_pressure_ratio", "Node PSI 10 s average (0-1).")


def pressure_ratios(avg10: tuple[float, float | None] | None) -> Pressure | None:
    """PSI avg10 percentages as ratios."""
    if avg10 is None:
        return None
    some, full = avg10
    return Pressure(some / 100.0, None if full is None else full / 100.0)


class NodeCollector(KeepsNothing):
    def __init__(self, deps: CollectorDeps) -> None:
        self.proc, self.counters, self.psi_resources = deps.proc, deps.counters, deps.psi_resources

    def collect(self, ctx: PassContext) -> NodeSample:
        busy_seconds = self.proc.cpu_times().busy_seconds
        mem = self.proc.meminfo()
        busy = self.counters.rate("node-busy-seconds", busy_seconds, ctx.now, clamp=True)
        capacity = float(self.proc.cpu_count)
        pressure: dict[str, Pressure] = {}
        for res in self.psi_resources:
            p = pressure_ratios(self.proc.pressure(res))
            if p is not None:
                pressure[res] = p
        return NodeSample(
            cpu_capacity_cores=capacity,
            cpu_cores=None if busy is None else min(busy, capacity),
            memory_total_bytes=mem.total_bytes,
            memory_used_bytes=mem.used_bytes,
            memory_page_cache_bytes=mem.page_cache_bytes,
            pressure=pressure,
        )


def pressure_series(f: Families, family: Family, labels: dict[str, str], pressure: dict[str, Pressure]) -> None:
    """PSI ratios, some and full per resource."""
    for res, p in sorted(pressure.items()):
        f.add(family, {**labels, "resource": res, "kind": "some"}, p.some_avg10)
        f.add(family, {**labels, "resource": res, "kind": "full"}, p.full_avg10)


def _series(f: Families, snap: Snapshot, nl: dict[str, str]) -> None:
    sample = snap.node
    f.add(CPU_CAPACITY, nl, sample.cpu_capacity_cores)
    f.add(CPU_USAGE, nl, sample.cpu_cores)
    f.add(CPU_RATIO, nl, sample.cpu_usage_ratio)
    f.add(MEMORY_TOTAL, nl, sample.memory_total_bytes)
    f.add(MEMORY_USED, nl, sample.memory_used_bytes)
    f.add(PAGE_CACHE, nl, sample.memory_page_cache_bytes)
    f.add(MEMORY_RATIO, nl, sample.memory_usage_ratio)
    pressure_series(f, PRESSURE, nl, sample.pressure)


register(
    "node",
    True,
    NodeCollector,
    fills="node",
    order=10,
    always_on=True,
    families=(CPU_CAPACITY, CPU_USAGE, CPU_RATIO, MEMORY_TOTAL, MEMORY_USED, PAGE_CACHE, MEMORY_RATIO, PRESSURE),
    node_series=_series,
    what="The node's CPU, memory and pressure from /proc.",
)
