"""The `pods` collector (always on): each pod's CPU, throttling and memory from its cgroup, in one visit per pod
during which the pod collectors (containers, PSI) read their part of it. Capacity, eviction and enforcement
decide on it. A vanished pod is skipped and forgotten; an unreadable one is logged once a minute."""

from __future__ import annotations

import logging
import time
import zlib

from agent.collectors.context import CollectorDeps, PassContext
from agent.collectors.registry import Collector, register
from agent.snapshot import PodMeta, PodSample
from cgroup import CgroupError, CgroupGone, PodCgroup
from common.families import Family
from common.logs import Repeats, repeated

log = logging.getLogger(__name__)

CPU_USAGE = Family("colo_pod_cpu_usage_cores", "CPU cores used by a pod.")
WORKING_SET = Family("colo_pod_memory_working_set_bytes", "Working set of a pod.")
ANON = Family("colo_pod_memory_anon_bytes", "Anonymous memory of a pod.")
THROTTLED = Family(
    "colo_pod_cpu_throttled_ratio", "Throttled over total CFS periods of a pod during the last tick (0-1)."
)


class PodsCollector:
    def __init__(self, deps: CollectorDeps) -> None:
        self.source, self.reader, self.cpu_rates = deps.source, deps.reader, deps.cpu_rates
        self.pod_memory_limits = deps.pod_memory_limits
        self.limit_every = deps.container_stat_every
        self.parts: tuple[tuple[str, str, Collector], ...] = ()  # (name, PodSample field, pod collector)
        self._limit: dict[str, int | None] = {}  # pod cgroup -> its memory limit, read on the pod's turn
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
        cpu = self.reader.cpu(path)
        cores, throttled = self.cpu_rates.rate(path, ctx.now, cpu.usage_ns, cpu.nr_periods, cpu.nr_throttled)
        mem = self.reader.memory(path)
        ctx.seen.add(path)
        sample = PodSample(
            meta, pod.qos, path, cores, mem.working_set_bytes, mem.anon_bytes, mem.usage_bytes, mem.file_bytes,
            throttled, (), memory_limit_bytes=self._memory_limit(ctx.seq, path),
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

    def _memory_limit(self, seq: int, path: str) -> int | None:
        """The pod cgroup's memory limit: it changes only with a resize, so it is read on the pod's turn (as
        container stats are) and kept in between; unreadable counts as unlimited."""
        if not self.pod_memory_limits:
            return None
        if path in self._limit and (seq + zlib.crc32(path.encode())) % self.limit_every:
            return self._limit[path]
        try:
            limit = self.reader.memory_limit(path)
        except CgroupError:
            limit = None
        self._limit[path] = limit
        return limit

    def forget(self, cgroup: str) -> None:
        self._limit.pop(cgroup, None)

    def close(self) -> None:
        return None


register("pods", True, PodsCollector, fills="pods", always_on=True)
