"""One sampling pass: the node from /proc, the QoS tiers, every pod and container from cgroups, the
network from netlink; counters become rates over the real elapsed monotonic time."""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Protocol

from agent.capacity import online_key, system_key
from agent.collectors import ALWAYS_ON, COLLECTORS, PassClock
from agent.netstats import NetCounters
from agent.procfs import HostProc
from agent.rates import CounterRates
from agent.snapshot import (
    ContainerSample,
    InterfaceSample,
    NodeSample,
    PodMeta,
    PodSample,
    Pressure,
    Snapshot,
    TierSample,
)
from agent.windows import SeriesKey, WindowStore
from cgroup import (
    QOS_CLASSES,
    CgroupError,
    CgroupGone,
    CgroupReader,
    CpuUsage,
    Layout,
    MemoryUsage,
    PathModel,
    PodCgroup,
    QoS,
    discover_pods,
)
from cgroup.reader import PSI_RESOURCES
from common.logs import Repeats, repeated

log = logging.getLogger(__name__)
RETAIN_PASSES = 60


class PodSource(Protocol):
    """What to sample this tick: each pod's metadata and its cgroups."""

    def pods(self, now: float) -> Sequence[tuple[PodMeta, PodCgroup]]: ...

    def vanished(self, uid: str) -> None:
        """A pod's cgroup is gone: look again before the next pass."""


class CgroupPodSource:
    """Standalone: pods found in the cgroup tree alone, re-scanned every `rescan_seconds` or when one vanished."""

    def __init__(self, layout: Layout, model: PathModel, rescan_seconds: float = 10.0) -> None:
        self.layout, self.model, self.rescan_seconds = layout, model, rescan_seconds
        self._pods: list[tuple[PodMeta, PodCgroup]] = []
        self._scanned: float | None = None

    def pods(self, now: float) -> Sequence[tuple[PodMeta, PodCgroup]]:
        if self._scanned is None or now - self._scanned >= self.rescan_seconds:
            self._pods = [(PodMeta(p.uid), p) for p in discover_pods(self.layout, self.model)]
            self._scanned = now
        return self._pods

    def vanished(self, uid: str) -> None:
        self._scanned = None


def _pressure(avg10: tuple[float, float | None] | None) -> Pressure | None:
    """PSI avg10 percentages as ratios."""
    if avg10 is None:
        return None
    some, full = avg10
    return Pressure(some / 100.0, None if full is None else full / 100.0)


class Sampler:
    """Takes snapshots and feeds the windows. Not thread-safe: one sampling thread owns it.

    Pods, tiers and the node are read in full every pass. A container's memory.stat, the costliest file, is
    read every `container_stat_every` passes; in between its working set is its fresh usage minus the last
    inactive file pages (what cAdvisor does at its housekeeping interval anyway).
    """

    def __init__(
        self,
        layout: Layout,
        model: PathModel,
        source: PodSource,
        windows: WindowStore,
        *,
        host_root: str = "/",
        reader: CgroupReader | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        container_stat_every: int = 1,
        collectors: frozenset[str] = frozenset(COLLECTORS),
        pod_memory_limits: bool = True,
    ) -> None:
        self.layout, self.model, self.source, self.windows = layout, model, source, windows
        self.reader = reader or CgroupReader(layout)
        self.proc = HostProc(host_root)
        self.net = NetCounters(host_root)
        self.rates = CounterRates()
        self.clock, self.wall_clock = clock, wall_clock
        self.seq = 0
        self._pod_failures = Repeats()  # an unreadable pod fails every pass: report it once a minute
        self._prev_node_cpu: tuple[float, float] | None = None
        self._prev_cpu: dict[str, tuple[float, CpuUsage]] = {}  # cgroup -> (time, counters) of the last pass
        self._container_mem: dict[str, MemoryUsage] = {}  # container cgroup -> last full memory reading
        self._pod_limit: dict[str, int | None] = {}  # pod cgroup -> its memory limit, read on the pod's turn
        self.pod_memory_limits = pod_memory_limits  # only memory QoS reads them: not read while nothing does
        self.container_stat_every = max(1, container_stat_every)
        self._known_cgroups: set[str] = set()
        self._previous_cgroups: set[str] = set()
        # pod PSI only for resources the kernel reports at all (psi=0 kernels have no /proc/pressure)
        self.psi_resources = tuple(r for r in PSI_RESOURCES if self.proc.pressure(r) is not None)
        self.psi_enabled = layout.unified is not None and bool(self.psi_resources) and "psi" in collectors
        self.collectors = collectors | ALWAYS_ON
        self._clock = PassClock(self.collectors)

    # -- parts of a pass -------------------------------------------------------------------------
    def _node(self, now: float) -> NodeSample:
        cpu = self.proc.cpu_times()
        mem = self.proc.meminfo()
        # /proc/stat's idle and iowait may step backwards on tickless kernels: clamp instead of dropping
        prev, self._prev_node_cpu = self._prev_node_cpu, (now, cpu.busy_seconds)
        busy = None if prev is None or now <= prev[0] else max(0.0, cpu.busy_seconds - prev[1]) / (now - prev[0])
        pressure: dict[str, Pressure] = {}
        for res in self.psi_resources:
            p = _pressure(self.proc.pressure(res))
            if p is not None:
                pressure[res] = p
        return NodeSample(
            cpu_capacity_cores=float(self.proc.cpu_count),
            cpu_cores=None if busy is None else min(busy, float(self.proc.cpu_count)),
            memory_total_bytes=mem.total_bytes,
            memory_used_bytes=mem.used_bytes,
            memory_page_cache_bytes=mem.page_cache_bytes,
            pressure=pressure,
        )

    def _cpu(self, cgroup: str, now: float) -> tuple[float | None, float | None]:
        """(cores, throttled ratio) of a cgroup over the last tick; None on a first sample or a reset."""
        cpu = self.reader.cpu(cgroup)
        prev = self._prev_cpu.get(cgroup)
        self._prev_cpu[cgroup] = (now, cpu)
        if prev is None:
            return None, None
        t0, before = prev
        dt = now - t0
        if dt <= 0 or cpu.usage_ns < before.usage_ns or cpu.nr_periods < before.nr_periods:
            return None, None  # a counter went backwards: the cgroup was recreated
        periods = cpu.nr_periods - before.nr_periods
        throttled = cpu.nr_throttled - before.nr_throttled
        ratio = (min(1.0, throttled / periods) if throttled >= 0 else None) if periods > 0 else 0.0
        return (cpu.usage_ns - before.usage_ns) / 1e9 / dt, ratio

    def _pod(self, meta: PodMeta, pod: PodCgroup, now: float) -> PodSample:
        cores, throttled = self._cpu(pod.path, now)
        mem = self.reader.memory(pod.path)
        self._known_cgroups.add(pod.path)
        containers: list[ContainerSample] = []
        every = self.container_stat_every
        limit = self._memory_limit(pod.path, every)
        clock = self._clock
        started = time.perf_counter()
        for c in pod.containers if "containers" in self.collectors else ():
            try:
                c_cores, c_throttled = self._cpu(c.path, now)
                # each container on its own turn (spread by its cgroup path), so no pass reads them all
                turn = (self.seq + zlib.crc32(c.path.encode())) % every == 0
                previous = None if turn else self._container_mem.get(c.path)
                c_mem = self.reader.memory(c.path, previous)
                self._container_mem[c.path] = c_mem
            except CgroupGone:
                self.reader.forget(c.path)
                continue
            except CgroupError:
                clock.failed("containers")
                clock.add("containers", started)
                raise
            self._known_cgroups.add(c.path)
            containers.append(
                ContainerSample(
                    c.id, c.path, c_cores, c_mem.working_set_bytes, c_mem.anon_bytes, c_mem.usage_bytes, c_throttled
                )
            )
        started = clock.add("containers", started)
        pressure: dict[str, Pressure] = {}
        if self.psi_enabled:
            for res in self.psi_resources:
                p = _pressure(self.reader.psi_avg10(pod.path, res))
                if p is not None:
                    pressure[res] = p
            if not pressure and not self.layout.is_v2:
                self.psi_enabled = False  # hybrid host whose pods have no directory on the unified tree
            clock.add("psi", started)
        return PodSample(
            meta=meta,
            qos=pod.qos,
            cgroup=pod.path,
            cpu_cores=cores,
            memory_working_set_bytes=mem.working_set_bytes,
            memory_anon_bytes=mem.anon_bytes,
            memory_usage_bytes=mem.usage_bytes,
            memory_file_bytes=mem.file_bytes,
            cpu_throttled_ratio=throttled,
            containers=tuple(containers),
            pressure=pressure,
            memory_limit_bytes=limit,
        )

    def _memory_limit(self, path: str, every: int) -> int | None:
        """The pod cgroup's memory limit: it changes only with a resize, so it is read on the pod's turn (as
        container stats are) and kept in between; unreadable counts as unlimited."""
        if not self.pod_memory_limits:
            return None
        if path in self._pod_limit and (self.seq + zlib.crc32(path.encode())) % every:
            return self._pod_limit[path]
        try:
            limit = self.reader.memory_limit(path)
        except CgroupError:
            limit = None
        self._pod_limit[path] = limit
        return limit

    def _tiers(self, now: float) -> dict[str, TierSample]:
        """The QoS tiers. Guaranteed pods live in kubepods itself, which also holds the other two tiers:
        the guaranteed figures are kubepods minus those, floored at zero."""
        read: dict[QoS, tuple[float | None, int]] = {}
        for qos in QOS_CLASSES:
            path = self.model.tier(qos)
            try:
                cores, _ = self._cpu(path, now)
                read[qos] = (cores, self.reader.memory(path).working_set_bytes)
            except CgroupError:
                continue  # no kubelet on this machine, or the tier is not there yet
            self._known_cgroups.add(path)
        if "guaranteed" in read:
            cores, ws = read["guaranteed"]
            for sub in QOS_CLASSES[1:]:
                sub_cores, sub_ws = read.get(sub, (0.0, 0))
                cores = None if cores is None or sub_cores is None else cores - sub_cores
                ws -= sub_ws
            read["guaranteed"] = (None if cores is None else max(0.0, cores), max(0, ws))
        return {qos: TierSample(qos, self.model.tier(qos), c, w) for qos, (c, w) in read.items()}

    def _interfaces(self, now: float) -> tuple[InterfaceSample, ...]:
        out = []
        for c in self.net.read(now):
            rx = self.rates.rate(("net", c.name, "rx"), c.rx_bytes, now)
            tx = self.rates.rate(("net", c.name, "tx"), c.tx_bytes, now)
            out.append(InterfaceSample(c.name, True, rx, tx))
        return tuple(out)

    # -- the pass --------------------------------------------------------------------------------
    def sample(self) -> Snapshot:
        """One full pass. A vanished pod is skipped and forgotten; no error but the node's stops the pass."""
        start = now = self.clock()
        wall = self.wall_clock()
        self._known_cgroups = set()
        clock = self._clock = PassClock(self.collectors)
        started = time.perf_counter()
        node = self._node(now)
        started = clock.add("node", started)
        tiers = self._tiers(now) if "tiers" in self.collectors else {}
        started = clock.add("tiers", started) if "tiers" in self.collectors else started
        pods: dict[str, PodSample] = {}
        for meta, pod in self.source.pods(now):
            try:
                pods[meta.uid] = self._pod(meta, pod, now)
                if self._pod_failures:
                    self._pod_failures.ended(meta.uid)
            except CgroupGone:
                self.reader.forget(pod.path)
                self.source.vanished(meta.uid)
            except CgroupError as exc:
                clock.failed("pods")
                if (held := self._pod_failures.occurred(meta.uid)) is not None:
                    log.warning("pod %s: %s%s", meta.uid, exc, repeated(held))
        clock.add("pods", started)
        clock.exclude("pods", "containers", "psi")  # read within the pods' loop, charged to themselves
        interfaces: tuple[InterfaceSample, ...] = ()
        if "network" in self.collectors:
            started = time.perf_counter()
            interfaces = self._interfaces(now)
            if not self.net.ok:
                clock.failed("network")
            clock.add("network", started)
        self._feed_windows(now, node, pods)
        self._forget_vanished(pods)
        self.seq += 1
        return Snapshot(self.seq, now, wall, node, tiers, pods, interfaces, self.clock() - start, clock.runs())

    def _feed_windows(self, now: float, node: NodeSample, pods: dict[str, PodSample]) -> None:
        """Node usage as ratios; pods in cores and working-set bytes."""
        batch: list[tuple[SeriesKey, float]] = [(("node", "", "memory"), node.memory_usage_ratio)]
        ratio = node.cpu_usage_ratio
        if ratio is not None:
            batch.append((("node", "", "cpu"), ratio))
        online_cpu = online_mem = pods_cpu = pods_mem = 0.0
        append = batch.append
        for uid, p in pods.items():
            cpu, mem = p.cpu_cores, float(p.memory_working_set_bytes)
            online = p.meta.pod_class != "offline"  # unknown counts as online, as everywhere (agent.node_state)
            if cpu is not None:
                append((("pod", uid, "cpu"), cpu))
                pods_cpu += cpu
                if online:
                    online_cpu += cpu
            append((("pod", uid, "memory"), mem))
            pods_mem += mem
            if online:
                online_mem += mem
        # the capacity predictor's node series (agent.capacity): online usage and usage outside pods
        batch += [(online_key("cpu"), online_cpu), (online_key("memory"), online_mem),
                  (system_key("memory"), max(0.0, node.memory_used_bytes - pods_mem))]  # fmt: skip
        if node.cpu_cores is not None:
            batch.append((system_key("cpu"), max(0.0, node.cpu_cores - pods_cpu)))
        self.windows.add_many(now, batch)  # one acquisition of the store's lock for the whole tick

    def _forget_vanished(self, pods: dict[str, PodSample]) -> None:
        """Vanished pods leave the windows, the rate memory and the open descriptors. The windows are also
        swept on the first pass and every RETAIN_PASSES passes: series restored from the state file for pods
        that ended while the agent was down have no cgroup to vanish."""
        gone = self._previous_cgroups - self._known_cgroups
        self._previous_cgroups = self._known_cgroups
        for cgroup in gone:
            self.reader.forget(cgroup)
            self._prev_cpu.pop(cgroup, None)
            self._container_mem.pop(cgroup, None)
            self._pod_limit.pop(cgroup, None)
        if gone or self.seq % RETAIN_PASSES == 0:
            self.windows.retain(lambda key: key[0] != "pod" or key[1] in pods)

    def close(self) -> None:
        self.net.close()
        self.reader.files.close()
