"""One sampling pass: the registered collectors in pass order (agent/collectors/), their parts assembled into a
snapshot, the windows fed, and what vanished forgotten."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agent.capacity import online_key, system_key
from agent.collectors import always_on, enabled_from, specs
from agent.collectors.context import CollectorDeps, PassContext
from agent.collectors.pods import PodsCollector
from agent.collectors.registry import Collector
from agent.pass_clock import PassClock
from agent.pod_source import CgroupPodSource, PodSource
from agent.snapshot import NodeSample, PodSample, Snapshot
from agent.windows import SeriesKey, WindowStore
from cgroup import CgroupReader, Layout, PathModel

__all__ = ["CgroupPodSource", "PodSource", "Sampler"]

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
    ) -> None:
        self.layout, self.model, self.source, self.windows = layout, model, source, windows
        self.reader = reader or CgroupReader(layout)
        self.clock, self.wall_clock = clock, wall_clock
        self.seq = 0
        self.deps = CollectorDeps(
            layout, model, source, self.reader, host_root, container_every, container_stat_every, pod_memory_limits
        )
        self.psi_resources = self.deps.psi_resources
        enabled = (enabled_from({}) if collectors is None else collectors) | always_on()  # None: the defaults
        self.collectors = enabled
        chosen = [s for s in specs() if s.name in enabled]
        built: dict[str, Collector] = {s.name: s.factory(self.deps) for s in chosen}
        self._node_scope = tuple((s.name, s.fills, built[s.name]) for s in chosen if s.scope == "node")
        self._pod_scope = tuple(s.name for s in chosen if s.scope == "pod")
        for collector in built.values():
            if isinstance(collector, PodsCollector):
                collector.parts = tuple((s.name, s.fills, built[s.name]) for s in chosen if s.scope == "pod")
        self._built = tuple(built.values())
        self._ctx = PassContext(PassClock(s.name for s in chosen))
        self._previous: set[str] = set()  # cgroups read by the last pass

    def sample(self) -> Snapshot:
        """One full pass. A vanished pod is skipped and forgotten; no error but the node's stops the pass."""
        start = now = self.clock()
        wall = self.wall_clock()
        ctx = self._ctx
        ctx.now, ctx.seq = now, self.seq
        ctx.clock.reset()
        previous, ctx.seen = self._previous, set()
        parts: dict[str, Any] = {"tiers": {}, "interfaces": ()}
        started = time.perf_counter()
        for name, fills, collector in self._node_scope:
            parts[fills] = collector.collect(ctx)
            started = ctx.clock.add(name, started)
        ctx.clock.exclude("pods", self._pod_scope)  # read within the pods' visits, charged to themselves
        node: NodeSample = parts["node"]
        pods: dict[str, PodSample] = parts["pods"]
        self._feed_windows(now, node, pods)
        self._forget_vanished(previous - ctx.seen, pods)
        self._previous = ctx.seen
        self.seq += 1
        return Snapshot(seq=self.seq, mono=now, wall=wall, duration_seconds=self.clock() - start,
                        collectors=ctx.clock.runs(), **parts)  # fmt: skip

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
