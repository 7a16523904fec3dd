"""The `pods` collector (always on): each pod's CPU, throttling and memory from its cgroup, in one visit per pod
during which the pod collectors (containers, PSI) read their part of it. Capacity, eviction and enforcement
decide on it every pass: CPU and memory usage are read every pass. The CFS throttling counters (only exported),
memory.stat (the costliest file: the kernel flushes per-CPU counters to print it) and the memory limit (it
changes only with a resize) are read on the pod's turn, every `container_stat_every` passes (spread by a hash
of its cgroup path); in between the throttled ratio of the last turn stands and the working set is the fresh
usage minus the last inactive file pages, as for containers and as cAdvisor between its housekeeping runs.
A vanished pod is skipped and forgotten; an unreadable one is logged once a minute."""

from __future__ import annotations

import logging
import time
import zlib

from agent.collectors.context import CollectorDeps, PassContext
from agent.collectors.registry import Collector, register
from agent.snapshot import PodMeta, PodSample
from cgroup import CgroupError, CgroupGone, MemoryUsage, PodCgroup
from common.families import Family
from common.logs import Repeats, repeated

log = logging.getLogger(__name__)

CPU_USAGE = Family("colo_pod_cpu_usage_cores", "CPU cores used by a pod.")
WORKING_SET = Family("colo_pod_memory_working_set_bytes", "Working set of a pod.")
ANON = Family("colo_pod_memory_anon_bytes", "Anonymous memory of a pod.")
THROTTLED = Family(
    "colo_pod_cpu_throttled_ratio", "Throttled over total CFS periods of a pod during the last tick (0-1)."
)


class _Kept:
    """What is kept of a pod between its turns."""

    __slots__ = ("limit", "memory", "throttled", "turn")

    def __init__(self, turn: int) -> None:
        self.turn = turn
        self.memory: MemoryUsage | None = None
        self.limit: int | None = None
        self.throttled: float | None = None


class PodsCollector:
    def __init__(self, deps: CollectorDeps) -> None:
        self.source, self.reader = deps.source, deps.reader
        self.cpu_rates, self.counters = deps.cpu_rates, deps.counters
        self.pod_memory_limits = deps.pod_memory_limits
        self.detail_every = max(1, deps.container_stat_every)
        self.parts: tuple[tuple[str, str, Collector], ...] = ()  # (name, PodSample field, pod collector)
        self._kept: dict[str, _Kept] = {}  # pod cgroup -> its turn, last memory reading and limit
        self._failures = Repeats()  # an unreadable pod fails every pass: report it once a minute

    def collect(self, ctx: PassContext) -> dict[str, PodSample]:
        pods: dict[str, PodSample] = {}
        for meta, pod in self.source.pods(ctx.now):
            try:
                pods[meta.uid] = self._pod(ctx, meta, pod)
                if self._failures:
                    self._failures.ended(meta.uid)
            except CgroupGone:
                self.reader.forget(pod.path)
                self.source.vanished(meta.uid)
            except CgroupError as exc:
                ctx.failed("pods")
                if (held := self._failures.occurred(meta.uid)) is not None:
                    log.warning("pod %s: %s%s", meta.uid, exc, repeated(held))
        ctx.meta = ctx.pod = None
        return pods

    def _pod(self, ctx: PassContext, meta: PodMeta, pod: PodCgroup) -> PodSample:
        path = pod.path
        kept = self._kept.get(path)
        turn = kept is None or (ctx.seq + kept.turn) % self.detail_every == 0
        if kept is None:
            kept = self._kept[path] = _Kept(zlib.crc32(path.encode()))
        if turn:  # usage and throttling together: the throttled ratio spans the turns
            cpu = self.reader.cpu(path)
            usage_ns = cpu.usage_ns
            _, kept.throttled = self.cpu_rates.rate(path, ctx.now, usage_ns, cpu.nr_periods, cpu.nr_throttled)
            if self.pod_memory_limits:
                kept.limit = self._memory_limit(path)
        else:
            usage_ns = self.reader.cpu_usage_ns(path)
        ns_per_second = self.counters.rate(path, usage_ns, ctx.now)
        cores = None if ns_per_second is None else ns_per_second / 1e9
        mem = kept.memory = self.reader.memory(path, None if turn else kept.memory)
        ctx.seen.add(path)
        sample = PodSample(
            meta, pod.qos, path, cores, mem.working_set_bytes, mem.anon_bytes, mem.usage_bytes, mem.file_bytes,
            kept.throttled, (), memory_limit_bytes=kept.limit,
        )  # fmt: skip
        if self.parts:
            ctx.meta, ctx.pod = meta, pod
            clock = ctx.clock
            started = time.perf_counter()
            for name, fills, part in self.parts:
                try:
                    setattr(sample, fills, part.collect(ctx))
                except CgroupGone:
                    raise
                except CgroupError:
                    ctx.failed(name)
                    clock.add(name, started)
                    raise
                started = clock.add(name, started)
        return sample

    def _memory_limit(self, path: str) -> int | None:
        """The pod cgroup's memory limit; unreadable counts as unlimited."""
        try:
            return self.reader.memory_limit(path)
        except CgroupError:
            return None

    def forget(self, cgroup: str) -> None:
        self._kept.pop(cgroup, None)

    def close(self) -> None:
        return None


register(
    "pods",
    True,
    PodsCollector,
    fills="pods",
    order=30,
    always_on=True,
    what="Every pod's cgroups: CPU and memory usage, throttling, limits.",
)
