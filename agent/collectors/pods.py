"""The `pods` collector (always on): each pod's CPU, throttling and memory from its cgroup, in one visit per pod
during which the pod collectors (containers, PSI) read their part of it. Capacity, eviction and enforcement
decide on it every pass: CPU and memory usage are read every pass. memory.stat (the costliest file: the kernel
flushes per-CPU counters to print it) and the memory limit (it changes only with a resize) are read on the
pod's detail turn, every `container_stat_every` passes (spread by a hash of its cgroup path); in between the
working set is the fresh usage minus the last inactive file pages, as for containers and as cAdvisor between
its housekeeping runs. The CFS throttling counters, which only /metrics shows, are read at the containers'
pace (every `max(container_every, container_stat_every)` passes, on the same turn: at the agent's defaults one
reading per container and pod for each 15 s scrape); in between the throttled ratio of the last reading
stands. A vanished pod is skipped and forgotten; an unreadable one is logged once a minute."""

from __future__ import annotations

import logging
import zlib
from time import perf_counter

from agent.collectors.context import CollectorDeps, PassContext
from agent.collectors.registry import Collector, register
from agent.rates import counter_rate, cpu_rate
from agent.snapshot import PodMeta, PodSample
from cgroup import CgroupError, CgroupGone, CounterFiles, PodCgroup
from common.families import Family
from common.logs import Repeats, repeated

log = logging.getLogger(__name__)

CPU_USAGE = Family("colo_pod_cpu_usage_cores", "CPU cores used by a pod.")
WORKING_SET = Family("colo_pod_memory_working_set_bytes", "Working set of a pod.")
ANON = Family("colo_pod_memory_anon_bytes", "Anonymous memory of a pod.")
THROTTLED = Family(
    "colo_pod_cpu_throttled_ratio", "Throttled over total CFS periods of a pod during the last tick (0-1)."
)


class _Pod:
    """A pod's slot, kept between passes: its counter files, its turn, and what the last readings left (the
    usage counter and its time for the rate; the detail of its last turn)."""

    __slots__ = ("anon", "at", "file", "files", "inactive", "limit", "throttled", "turn", "turn_cpu", "usage_ns")

    def __init__(self, files: CounterFiles, turn: int) -> None:
        self.files, self.turn = files, turn
        self.at: float | None = None  # when usage_ns was read (monotonic); None: never
        self.usage_ns = 0
        self.inactive = self.anon = self.file = 0
        self.throttled: float | None = None
        self.turn_cpu: tuple[float, int, int, int] | None = None  # last CFS reading: time, usage, periods, throttled
        self.limit: int | None = None


class PodsCollector:
    def __init__(self, deps: CollectorDeps) -> None:
        self.source, self.reader = deps.source, deps.reader
        self.pod_memory_limits = deps.pod_memory_limits
        self.detail_every = max(1, deps.container_stat_every)
        self.throttling_every = max(self.detail_every, deps.container_every)
        self.parts: tuple[tuple[str, str, Collector], ...] = ()  # (name, PodSample field, pod collector)
        self._kept: dict[str, _Pod] = {}  # pod cgroup -> its slot
        self._failures = Repeats()  # an unreadable pod fails every pass: report it once a minute

    def collect(self, ctx: PassContext) -> dict[str, PodSample]:
        pods: dict[str, PodSample] = {}
        parts = tuple(p for p in self.parts if getattr(p[2], "active", True))  # a pod collector may stand down
        failing = bool(self._failures)  # pods that failed before: one that reads again is reported back
        visit = self._pod
        for meta, pod in self.source.pods(ctx.now):
            try:
                pods[meta.uid] = visit(ctx, meta, pod, parts)
                if failing:
                    self._failures.ended(meta.uid)
            except CgroupGone:
                self._kept.pop(pod.path, None)
                self.reader.forget(pod.path)
                self.source.vanished(meta.uid)
            except CgroupError as exc:
                ctx.failed("pods")
                if (held := self._failures.occurred(meta.uid)) is not None:
                    log.warning("pod %s: %s%s", meta.uid, exc, repeated(held))
        ctx.meta = ctx.pod = None
        return pods

    def _pod(
        self, ctx: PassContext, meta: PodMeta, pod: PodCgroup, parts: tuple[tuple[str, str, Collector], ...]
    ) -> PodSample:
        path = pod.path
        st = self._kept.get(path)
        if st is None:  # first sight: everything
            st = self._kept[path] = _Pod(self.reader.counters(path), zlib.crc32(path.encode()))
            detail = throttling = True
        else:
            turn = ctx.seq + st.turn
            detail, throttling = turn % self.detail_every == 0, turn % self.throttling_every == 0
        files, now = st.files, ctx.now
        if throttling:  # usage and throttling together: the throttled ratio spans the readings
            usage_ns, periods, throttled, _ = self.reader.cpu_counters(files)
            last, st.turn_cpu = st.turn_cpu, (now, usage_ns, periods, throttled)
            st.throttled = None if last is None else cpu_rate(*last, now, usage_ns, periods, throttled)[1]
        else:
            usage_ns = files.cpu_usage_ns()
        usage = files.memory_usage()
        if detail:
            if self.pod_memory_limits:
                st.limit = self._memory_limit(path)
            st.inactive, st.anon, st.file = files.memory_stat()
        at, before = st.at, st.usage_ns
        st.at, st.usage_ns = now, usage_ns
        ns_per_second = None if at is None else counter_rate(before, at, usage_ns, now)
        cores = None if ns_per_second is None else ns_per_second / 1e9
        ctx.seen.add(path)
        sample = PodSample(meta, pod.qos, path, cores, max(0, usage - st.inactive), st.anon, usage, st.file,
                           st.throttled, (), {}, st.limit)  # fmt: skip
        if parts:
            ctx.meta, ctx.pod = meta, pod
            add = ctx.clock.add
            started = perf_counter()
            for name, fills, part in parts:
                try:
                    setattr(sample, fills, part.collect(ctx))
                except CgroupGone:
                    raise
                except CgroupError:
                    ctx.failed(name)
                    add(name, started)
                    raise
                started = add(name, started)
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
