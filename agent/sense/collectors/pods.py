"""The `pods` collector (always on): each pod's CPU, throttling and memory from its cgroup, in one visit per pod
during which the pod collectors (containers, PSI, ...) read their part of it, and all pods together from the
kubepods root.

Every pass reads what the 1 s decisions act on: each offline pod (suppression, eviction and the batch limits
decide pod by pod) and the root, whose counters are hierarchical, so that online usage = root − offline pods
is fresh each second (agent/node_state.py). An online pod's own readings are taken on its turn, every
`online_every` passes (spread by a hash of its cgroup path): `ONLINE_POD_EVERY` unless a 1 s decision reads
online pods one by one (quota burst, disk QoS: agent/main.py). In between its last sample stands — its CPU
rate then spans the passes since, its windows get nothing new — and so do its pod collectors' parts; a pod
whose metadata or containers changed is visited at once. Without a readable root every pod is read every pass.

memory.stat (the costliest file: the kernel flushes per-CPU counters to print it) and the memory limit (it
changes only with a resize) are read on the pod's detail turn, every `container_stat_every` passes; in between
the working set is the fresh usage minus the last inactive file pages, as for containers and as cAdvisor
between its housekeeping runs. The CFS throttling counters, which only /metrics shows, are read at the
containers' pace (every `max(container_every, container_stat_every)` passes, on the same turn: at the agent's
defaults one reading per container and pod for each 15 s scrape); in between the throttled ratio of the last
reading stands. A pod visited less often reads them at its first visit once they are due. A vanished pod is
skipped and forgotten; an unreadable one is logged once a minute."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Mapping, Sequence
from time import perf_counter
from typing import Any

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import Collector, register
from agent.sense.rates import counter_rate, cpu_rate
from agent.snapshot import PodMeta, PodSample, PodsTotal
from cgroup import CgroupError, CgroupGone, CounterFiles, PodCgroup
from common.exposition import LabelShapes
from common.families import Family, FamilyLines, PutLine
from common.logs import Repeats, repeated
from contract.agent_api import json_number

log = logging.getLogger(__name__)

#: Passes between two readings of one online pod when no 1 s decision reads online pods one by one (the
#: agent's default; 1 otherwise). At a 1 s interval, 5 s: the pace of the pods' memory.stat by default, twelve
#: readings a minute for each online pod's windows and three for each 15 s scrape, while the decisions see
#: the online pods' sum fresh each second through the kubepods root. At 250 pods x 3 containers, a third of
#: them offline, a pass reads 117 pods instead of 250.
ONLINE_POD_EVERY = 5

CPU_USAGE = Family("colo_pod_cpu_usage_cores", "CPU cores used by a pod.")
WORKING_SET = Family("colo_pod_memory_working_set_bytes", "Working set of a pod.")
ANON = Family("colo_pod_memory_anon_bytes", "Anonymous memory of a pod.")
THROTTLED = Family(
    "colo_pod_cpu_throttled_ratio", "Throttled over total CFS periods of a pod during the last tick (0-1)."
)


class _Pod:
    """A pod's slot, kept between passes: its counter files, its turn, what the last readings left (the usage
    counter and its time for the rate; the detail of its last turn), and its last visit (the sample, and the
    pod's cgroups and metadata it was taken for) that stands between an online pod's turns."""

    __slots__ = (
        "anon",
        "at",
        "detailed",
        "file",
        "files",
        "inactive",
        "limit",
        "paths",
        "pod",
        "sample",
        "throttled",
        "throttling",
        "turn",
        "turn_cpu",
        "usage_ns",
        "visited",
    )

    def __init__(self, files: CounterFiles, turn: int) -> None:
        self.files, self.turn = files, turn
        self.at: float | None = None  # when usage_ns was read (monotonic); None: never
        self.usage_ns = 0
        self.inactive = self.anon = self.file = 0
        self.throttled: float | None = None
        self.turn_cpu: tuple[float, int, int, int] | None = None  # last CFS reading: time, usage, periods, throttled
        self.limit: int | None = None
        self.detailed = self.throttling = self.visited = 0  # the passes of the last detail, CFS reading, visit
        self.pod: PodCgroup | None = None
        self.sample: PodSample | None = None
        self.paths: tuple[str, ...] = ()  # the sample's cgroups: the pod's and its containers'


class _Root:
    """The kubepods root's counter files and what its last readings left."""

    __slots__ = ("at", "files", "inactive", "path", "readable", "usage_ns")

    def __init__(self, path: str) -> None:
        self.path = path
        self.files: CounterFiles | None = None  # opened at the first reading
        self.at: float | None = None
        self.usage_ns = self.inactive = 0
        self.readable = True


#: a pod collector as a visit runs it: its name, what stores its part into the pod's sample, the collector
PodPart = tuple[str, Callable[[PodSample, Any], None], Collector[Any]]


class PodsCollector:
    def __init__(self, deps: CollectorDeps) -> None:
        self.source, self.reader = deps.source, deps.reader
        self.pod_memory_limits = deps.pod_memory_limits
        self.detail_every = max(1, deps.container_stat_every)
        self.throttling_every = max(self.detail_every, deps.container_every)
        self.online_every = max(1, deps.online_every)
        self._root = _Root(deps.model.kubepods())
        self.parts: tuple[PodPart, ...] = ()
        self._kept: dict[str, _Pod] = {}  # pod cgroup -> its slot
        self._failures = Repeats()  # an unreadable pod fails every pass: report it once a minute

    def collect(self, ctx: PassContext) -> dict[str, PodSample]:
        pods: dict[str, PodSample] = {}
        parts = tuple(p for p in self.parts if getattr(p[2], "active", True))  # a pod collector may stand down
        failing = bool(self._failures)  # pods that failed before: one that reads again is reported back
        ctx.pods_total = self._total(ctx)
        every = self.online_every if ctx.pods_total is not None else 1
        kept, seq, seen = self._kept, ctx.seq, ctx.seen
        visit = self._pod
        for meta, pod in self.source.pods(ctx.now):
            if every > 1 and meta.pod_class != "offline":  # unknown counts as online, as everywhere
                st = kept.get(pod.path)
                if (
                    st is not None
                    and (held := st.sample) is not None
                    and held.meta is meta
                    and st.pod is pod
                    and seq - st.visited < every
                    and (seq + st.turn) % every
                ):
                    pods[meta.uid] = held
                    seen.update(st.paths)
                    continue
            try:
                pods[meta.uid] = visit(ctx, meta, pod, parts)
                if failing:
                    self._failures.ended(meta.uid)
            except CgroupGone:
                kept.pop(pod.path, None)
                self.reader.forget(pod.path)
                self.source.vanished(meta.uid)
            except CgroupError as exc:
                ctx.failed("pods")
                if (held_failure := self._failures.occurred(meta.uid)) is not None:
                    log.warning("pod %s: %s%s", meta.uid, exc, repeated(held_failure))
        ctx.meta = ctx.pod = None
        ctx.pod_psi.clear()
        return pods

    def _total(self, ctx: PassContext) -> PodsTotal | None:
        """All pods' usage from the kubepods root — as the tiers collector read it in this pass, else read here,
        its memory.stat at the pods' detail pace; None (and every pod read every pass) while it cannot be
        read."""
        root, now = self._root, ctx.now
        try:
            if ctx.kubepods is not None:
                usage_ns, working_set = ctx.kubepods
            else:
                files = root.files = root.files or self.reader.counters(root.path)
                usage_ns, usage = files.cpu_usage_ns(), files.memory_usage()
                if root.at is None or ctx.seq % self.detail_every == 0:
                    root.inactive = files.memory_stat()[0]
                working_set = max(0, usage - root.inactive)
        except CgroupError as exc:
            if root.readable:
                log.debug("pods' root %s: %s; every pod is read every pass", root.path, exc)  # startup warned
            root.readable, root.at, root.files = False, None, None
            self.reader.forget(root.path)
            return None
        if not root.readable:
            log.debug("pods' root %s: read again", root.path)
            root.readable = True
        at, before = root.at, root.usage_ns
        root.at, root.usage_ns = now, usage_ns
        ns_per_second = None if at is None else counter_rate(before, at, usage_ns, now)
        return PodsTotal(None if ns_per_second is None else ns_per_second / 1e9, working_set)

    def _pod(self, ctx: PassContext, meta: PodMeta, pod: PodCgroup, parts: tuple[PodPart, ...]) -> PodSample:
        path = pod.path
        st = self._kept.get(path)
        seq = ctx.seq
        if st is None:  # first sight: everything
            st = self._kept[path] = _Pod(self.reader.counters(path), zlib.crc32(path.encode()))
            detail = throttling = True
        else:  # on its turn, or at the first visit since it was due (an online pod visited on its own turns)
            turn, d_every, t_every = seq + st.turn, self.detail_every, self.throttling_every
            detail = turn % d_every == 0 or seq - st.detailed >= d_every
            throttling = turn % t_every == 0 or seq - st.throttling >= t_every
        st.visited, st.sample = seq, None  # a visit that fails leaves nothing to stand in for the pod
        if detail:
            st.detailed = seq
        files, now = st.files, ctx.now
        if throttling:  # usage and throttling together: the throttled ratio spans the readings
            st.throttling = seq
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
        sample = PodSample(
            meta,
            pod.qos,
            path,
            cores,
            max(0, usage - st.inactive),
            st.anon,
            usage,
            st.file,
            st.throttled,
            (),
            {},
            st.limit,
        )
        if parts:
            ctx.meta, ctx.pod = meta, pod
            ctx.pod_psi.clear()  # what the last pod's visit read
            add = ctx.clock.add
            started = perf_counter()
            for name, store, part in parts:
                try:
                    store(sample, part.collect(ctx))
                except CgroupGone:
                    raise
                except CgroupError:
                    ctx.failed(name)
                    add(name, started)
                    raise
                started = add(name, started)
        st.pod, st.sample = pod, sample
        if self.online_every > 1:  # for the passes it stands
            st.paths = (path, *[c.cgroup for c in sample.containers])
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


def _series(put: PutLine, lines: Sequence[FamilyLines], labels: LabelShapes, pod: PodSample) -> None:
    cpu, ws, anon, thr = lines
    base = labels.base
    put(cpu, base, pod.cpu_cores)
    put(ws, base, pod.memory_working_set_bytes)
    put(anon, base, pod.memory_anon_bytes)
    put(thr, base, pod.cpu_throttled_ratio)


def _fields(pod: PodSample) -> Mapping[str, Any]:
    return {
        "cpu_cores": json_number(pod.cpu_cores),
        "memory_working_set_bytes": pod.memory_working_set_bytes,
        "memory_anon_bytes": pod.memory_anon_bytes,
        "cpu_throttled_ratio": json_number(pod.cpu_throttled_ratio),
    }


register(
    "pods",
    True,
    PodsCollector,
    fills="pods",
    order=30,
    always_on=True,
    families=(CPU_USAGE, WORKING_SET, ANON, THROTTLED),
    pod_series=_series,
    pod_fields=_fields,
    units={
        "cpu_cores": "cores",
        "memory_working_set_bytes": "bytes",
        "memory_anon_bytes": "bytes",
        "cpu_throttled_ratio": "ratio",
    },
    what="Every pod's cgroups: CPU and memory usage, throttling, limits.",
)
