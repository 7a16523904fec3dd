"""One sampling pass: the registered collectors in pass order (agent/sense/collectors/), their parts assembled into a
snapshot, the windows fed, and what vanished forgotten."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from agent.node_state import node_state
from agent.sense.collectors import always_on, enabled_from, specs
from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.pods import PodsCollector
from agent.sense.collectors.registry import Collector
from agent.sense.pass_clock import PassClock
from agent.sense.pod_source import CgroupPodSource, PodSource
from agent.snapshot import PodSample, Snapshot
from agent.windows.store import SeriesKey, WindowStore, online_key, system_key
from cgroup import CgroupReader, Layout, PathModel

__all__ = ["CgroupPodSource", "PodSource", "Sampler", "feed_windows"]

RETAIN_PASSES = 60


class Sampler:
    """Takes snapshots and feeds the windows. Not thread-safe: one sampling thread owns it."""

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
        container_every: int = 1,
        container_stat_every: int = 1,
        collectors: frozenset[str] | None = None,
        pod_memory_limits: bool = True,
        online_every: int = 1,
    ) -> None:
        self.layout, self.model, self.source, self.windows = layout, model, source, windows
        self.reader = reader or CgroupReader(layout)
        self.clock, self.wall_clock = clock, wall_clock
        self.seq = 0
        self.deps = CollectorDeps(
            layout,
            model,
            source,
            self.reader,
            host_root,
            container_every,
            container_stat_every,
            pod_memory_limits,
            online_every,
        )
        self.psi_resources = self.deps.psi_resources
        enabled = (enabled_from({}) if collectors is None else collectors) | always_on()  # None: the defaults
        self.collectors = enabled
        chosen = [s for s in specs() if s.name in enabled]
        built: dict[str, Collector[Any]] = {s.name: s.factory(self.deps) for s in chosen}
        self._node_scope = tuple((s.name, s.fills, built[s.name]) for s in chosen if s.scope == "node")
        self._pod_scope = tuple(s.name for s in chosen if s.scope == "pod")
        for collector in built.values():
            if isinstance(collector, PodsCollector):
                collector.parts = tuple((s.name, s.store, built[s.name]) for s in chosen if s.store is not None)
        self._built = tuple(built.values())
        self._ctx = PassContext(PassClock(s.name for s in chosen))
        self._previous: set[str] = set()  # cgroups read by the last pass
        self._fed: dict[str, PodSample] = {}  # the pod samples the windows got, by UID

    def sample(self) -> Snapshot:
        """One full pass. A vanished pod is skipped and forgotten; no error but the node's stops the pass."""
        start = now = self.clock()
        wall = self.wall_clock()
        ctx = self._ctx
        ctx.now, ctx.seq, ctx.kubepods = now, self.seq, None
        ctx.clock.reset()
        previous, ctx.seen = self._previous, set()
        parts: dict[str, Any] = {"tiers": {}, "interfaces": ()}
        started = time.perf_counter()
        for name, fills, collector in self._node_scope:
            parts[fills] = collector.collect(ctx)
            started = ctx.clock.add(name, started)
        ctx.clock.exclude("pods", self._pod_scope)  # read within the pods' visits, charged to themselves
        pods: dict[str, PodSample] = parts["pods"]
        self._forget_vanished(previous - ctx.seen, pods)
        self._previous = ctx.seen
        self.seq += 1
        snap = Snapshot(
            seq=self.seq,
            mono=now,
            wall=wall,
            duration_seconds=0.0,
            collectors=ctx.clock.runs(),
            pods_total=ctx.pods_total,
            **parts,
        )
        self._fed = feed_windows(self.windows, snap, self._fed)  # the online series as the decisions see it
        return dataclasses.replace(snap, duration_seconds=self.clock() - start)  # the feed is part of the pass

    def _forget_vanished(self, gone: set[str], pods: dict[str, PodSample]) -> None:
        """Vanished cgroups leave the rate memories, the collectors and the open descriptors; vanished pods the
        windows. The windows are also swept on the first pass and every RETAIN_PASSES passes: series restored
        from the state file for pods that ended while the agent was down have no cgroup to vanish."""
        for cgroup in gone:
            self.reader.forget(cgroup)
            self.deps.cpu_rates.forget(cgroup)
            self.deps.counters.forget(cgroup)
            for collector in self._built:
                collector.forget(cgroup)
        if gone or self.seq % RETAIN_PASSES == 0:
            self.windows.retain(lambda key: key[0] != "pod" or key[1] in pods)

    def close(self) -> None:
        for collector in self._built:
            collector.close()
        self.reader.files.close()


def feed_windows(windows: WindowStore, snap: Snapshot, fed: dict[str, PodSample]) -> dict[str, PodSample]:
    """Feed one pass: node usage as ratios; each pod read in this pass in cores and working-set bytes (a sample
    in `fed`, the one fed last, stands and is not fed again: an online pod's series get its readings, one per
    turn); the capacity predictor's node series (agent.capacity.lendable: online usage and usage outside pods) as the
    pass's decisions see them. Returns the samples fed, by UID, for the next pass."""
    node = snap.node
    batch: list[tuple[SeriesKey, float]] = [(("node", "", "memory"), node.memory_usage_ratio)]
    ratio = node.cpu_usage_ratio
    if ratio is not None:
        batch.append((("node", "", "cpu"), ratio))
    append = batch.append
    now_fed: dict[str, PodSample] = {}
    for uid, p in snap.pods.items():
        now_fed[uid] = p
        if fed.get(uid) is p:
            continue  # an online pod between its turns: its windows hold its reading already
        if p.cpu_cores is not None:
            append((("pod", uid, "cpu"), p.cpu_cores))
        append((("pod", uid, "memory"), float(p.memory_working_set_bytes)))
    state = node_state(snap, (None, None))
    cpu, memory = state.cpu, state.memory
    batch += [
        (online_key("cpu"), cpu.online),
        (online_key("memory"), memory.online),
        (system_key("memory"), memory.system or 0.0),
    ]
    if cpu.system is not None:
        batch.append((system_key("cpu"), cpu.system))
    windows.add_many(snap.mono, batch)  # one acquisition of the store's lock for the whole tick
    return now_fed
