"""The `containers` collector (pod scope): each container's CPU, throttling and memory, read during its pod's
visit.

Each container is read on its own turn (spread by a hash of its cgroup path): every `container_every` passes,
so that no pass reads them all; in between its last sample stands, its rates spanning the passes since. The
agent reads them every pass only when a 1 s decision needs them (quota burst); otherwise only /metrics does,
once per scrape. memory.stat, the costliest file, is read every `container_stat_every` passes at most; in
between the working set is the fresh usage minus the last inactive file pages (what cAdvisor does at its
housekeeping interval anyway).
"""

from __future__ import annotations

import zlib

from agent.collectors.context import CollectorDeps, PassContext
from agent.collectors.registry import register
from agent.snapshot import ContainerSample
from cgroup import CgroupGone, MemoryUsage
from common.families import Family

#: Passes between two readings of one container when no decision needs them every pass (the agent's default):
#: at a 1 s interval, as fresh as kubelet's own container stats (cAdvisor's 10 s housekeeping).
CONTAINER_EVERY = 10

CPU_USAGE = Family("colo_container_cpu_usage_cores", "CPU cores used by a container.")
WORKING_SET = Family("colo_container_memory_working_set_bytes", "Working set of a container.")
THROTTLED = Family(
    "colo_container_cpu_throttled_ratio",
    "Throttled over total CFS periods of a container during the last tick (0-1).",
)


class _Kept:
    """What is kept of a container between its turns."""

    __slots__ = ("memory", "sample", "turn")

    def __init__(self, turn: int) -> None:
        self.turn = turn
        self.memory: MemoryUsage | None = None
        self.sample: ContainerSample | None = None


class ContainersCollector:
    def __init__(self, deps: CollectorDeps) -> None:
        self.reader, self.cpu_rates = deps.reader, deps.cpu_rates
        self.every, self.stat_every = max(1, deps.container_every), max(1, deps.container_stat_every)
        self._kept: dict[str, _Kept] = {}  # container cgroup -> its turn and last reading

    def collect(self, ctx: PassContext) -> tuple[ContainerSample, ...]:
        assert ctx.pod is not None
        out: list[ContainerSample] = []
        seq, seen, kept_by_path = ctx.seq, ctx.seen, self._kept
        for c in ctx.pod.containers:
            path = c.path
            kept = kept_by_path.get(path)
            if kept is None:
                kept = kept_by_path[path] = _Kept(zlib.crc32(path.encode()))
            elif kept.sample is not None and (seq + kept.turn) % self.every:
                seen.add(path)
                out.append(kept.sample)
                continue
            try:
                cpu = self.reader.cpu(path)
                cores, throttled = self.cpu_rates.rate(path, ctx.now, cpu.usage_ns, cpu.nr_periods, cpu.nr_throttled)
                stat_turn = (seq + kept.turn) % self.stat_every == 0
                mem = self.reader.memory(path, None if stat_turn else kept.memory)
            except CgroupGone:
                self.reader.forget(path)
                continue
            seen.add(path)
            kept.memory = mem
            kept.sample = ContainerSample(
                c.id, path, cores, mem.working_set_bytes, mem.anon_bytes, mem.usage_bytes, throttled
            )
            out.append(kept.sample)
        return tuple(out)

    def forget(self, cgroup: str) -> None:
        self._kept.pop(cgroup, None)

    def close(self) -> None:
        return None


register(
    "containers",
    True,
    ContainersCollector,
    fills="containers",
    order=40,
    scope="pod",
    what="Every container's cgroups, besides its pod's.",
)
