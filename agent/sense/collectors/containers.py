"""The `containers` collector (pod scope): each container's CPU, throttling and memory, read during its pod's
visit.

Each container is read on its own turn (spread by a hash of its cgroup path): every `container_every` passes,
so that no pass reads them all; in between its last sample stands, its rates spanning the passes since. A
container of a pod visited only on the pod's own turns (an online pod: agent/sense/collectors/pods.py) is read at
the first visit once it is due. The agent reads them every pass only when a 1 s decision needs them (quota
burst); otherwise only /metrics does, once per scrape. memory.stat, the costliest file, is read every
`container_stat_every` passes at most; in between the working set is the fresh usage minus the last inactive
file pages (what cAdvisor does at its housekeeping interval anyway).

A pod whose containers are all between turns costs one lookup: the collector keeps, per pod, the samples it
returned and the pass at which the next of its containers is due, and returns the same tuple until then.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import register
from agent.sense.rates import cpu_rate
from agent.snapshot import ContainerSample, PodSample
from cgroup import CgroupGone, ContainerCgroup, CounterFiles
from common.exposition import LabelShapes, escape
from common.families import Family, FamilyLines, PutLine
from contract.agent_api import json_number

#: Passes between two readings of one container when no decision needs them every pass (the agent's default).
#: At a 1 s interval, 15 s: cAdvisor's longest housekeeping interval (kubelet's container stats are 10 to 15 s
#: old), and for a 15 s scrape one fresh reading per container per scrape, whose CPU rate spans that scrape's
#: interval (at 10 s a third of the CPU time fell in rates no scrape saw). A container reading is I/O bound
#: (four files, memory.stat the costliest): at 250 pods x 3 containers, 50 readings a pass instead of 75.
CONTAINER_EVERY = 15

CPU_USAGE = Family("colo_container_cpu_usage_cores", "CPU cores used by a container.")
WORKING_SET = Family("colo_container_memory_working_set_bytes", "Working set of a container.")
THROTTLED = Family(
    "colo_container_cpu_throttled_ratio",
    "Throttled over total CFS periods of a container during the last tick (0-1).",
)


class _Container:
    """A container's slot between its turns: its counter files, its turn, its last memory.stat figures and
    its last sample."""

    __slots__ = (
        "anon",
        "at",
        "file",
        "files",
        "inactive",
        "periods",
        "read",
        "sample",
        "stated",
        "throttled",
        "turn",
        "usage_ns",
    )

    def __init__(self, files: CounterFiles, turn: int) -> None:
        self.files, self.turn = files, turn
        self.inactive = self.anon = self.file = 0
        self.at = -1.0  # the last reading of the CPU counters (monotonic), for the rates; < 0: none yet
        self.usage_ns = self.periods = self.throttled = 0
        self.sample: ContainerSample | None = None
        self.read = self.stated = 0  # the passes of its last reading and of its last memory.stat


class _PodContainers:
    """What the collector returned for one pod, and until which pass it stands."""

    __slots__ = ("cgroups", "due", "paths", "samples")

    def __init__(
        self,
        cgroups: tuple[ContainerCgroup, ...],
        due: int,
        paths: tuple[str, ...],
        samples: tuple[ContainerSample, ...],
    ) -> None:
        self.cgroups, self.due, self.paths, self.samples = cgroups, due, paths, samples


class ContainersCollector:
    def __init__(self, deps: CollectorDeps) -> None:
        self.reader = deps.reader
        self.every, self.stat_every = max(1, deps.container_every), max(1, deps.container_stat_every)
        self._kept: dict[str, _Container] = {}  # container cgroup -> its slot
        self._pods: dict[str, _PodContainers] = {}  # pod cgroup -> what its containers gave last

    def collect(self, ctx: PassContext) -> tuple[ContainerSample, ...]:
        pod = ctx.pod
        assert pod is not None
        seq = ctx.seq
        held = self._pods.get(pod.path)
        if held is not None and seq < held.due and (held.cgroups is pod.containers or held.cgroups == pod.containers):
            ctx.seen.update(held.paths)
            return held.samples
        every, now = self.every, ctx.now
        out: list[ContainerSample] = []
        paths: list[str] = []
        due = seq + every
        for c in pod.containers:
            path = c.path
            kept = self._kept.get(path)
            if kept is None:
                kept = self._kept[path] = _Container(self.reader.counters(path), zlib.crc32(path.encode()))
            due = min(due, seq + 1 + (-(seq + 1 + kept.turn)) % every)  # the next pass on its turn
            sample = kept.sample
            if sample is None or (seq + kept.turn) % every == 0 or seq - kept.read >= every:
                try:
                    sample = self._read(c, kept, seq, now)
                except CgroupGone:
                    self.reader.forget(path)
                    del self._kept[path]
                    due = seq + 1  # looked at again next pass
                    continue
            paths.append(path)
            out.append(sample)
        ctx.seen.update(paths)
        samples = tuple(out)
        self._pods[pod.path] = _PodContainers(pod.containers, due, tuple(paths), samples)
        return samples

    def _read(self, c: ContainerCgroup, kept: _Container, seq: int, now: float) -> ContainerSample:
        path, files = c.path, kept.files
        usage_ns, periods, throttled, _ = self.reader.cpu_counters(files)
        cores, ratio = (
            (None, None)
            if kept.at < 0
            else cpu_rate(kept.at, kept.usage_ns, kept.periods, kept.throttled, now, usage_ns, periods, throttled)
        )
        kept.at, kept.usage_ns, kept.periods, kept.throttled = now, usage_ns, periods, throttled
        kept.read = seq
        usage = files.memory_usage()
        if kept.sample is None or (seq + kept.turn) % self.stat_every == 0 or seq - kept.stated >= self.stat_every:
            kept.stated = seq
            kept.inactive, kept.anon, kept.file = files.memory_stat()
        kept.sample = ContainerSample(c.id, path, cores, max(0, usage - kept.inactive), kept.anon, usage, ratio)
        return kept.sample

    def forget(self, cgroup: str) -> None:
        self._kept.pop(cgroup, None)
        self._pods.pop(cgroup, None)

    def close(self) -> None:
        return None


def _store(sample: PodSample, part: tuple[ContainerSample, ...]) -> None:
    sample.containers = part


def _series(put: PutLine, lines: Sequence[FamilyLines], labels: LabelShapes, pod: PodSample) -> None:
    if pod.containers:
        cpu, ws, thr = lines
        tmpl = labels.template(("container",))
        for c in pod.containers:
            cl = tmpl % escape(c.id)
            put(cpu, cl, c.cpu_cores)
            put(ws, cl, c.memory_working_set_bytes)
            put(thr, cl, c.cpu_throttled_ratio)


def _fields(pod: PodSample) -> Mapping[str, Any]:
    return {
        "containers": [
            {
                "id": c.id,
                "cpu_cores": json_number(c.cpu_cores),
                "memory_working_set_bytes": c.memory_working_set_bytes,
                "memory_anon_bytes": c.memory_anon_bytes,
                "cpu_throttled_ratio": json_number(c.cpu_throttled_ratio),
            }
            for c in pod.containers
        ]
    }


register(
    "containers",
    True,
    ContainersCollector,
    store=_store,
    order=40,
    scope="pod",
    families=(CPU_USAGE, WORKING_SET, THROTTLED),
    metrics_order=90,  # a pod's containers after its windows
    pod_series=_series,
    pod_fields=_fields,
    units={
        "containers.cpu_cores": "cores",
        "containers.memory_working_set_bytes": "bytes",
        "containers.memory_anon_bytes": "bytes",
        "containers.cpu_throttled_ratio": "ratio",
    },
    what="Every container's cgroups, besides its pod's.",
)
