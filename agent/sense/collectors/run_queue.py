"""The `run_queue` collector (pod scope): what each pod's threads felt, online and offline alike — seconds they
waited on a run queue per second (/proc/<tid>/schedstat summed over the pod's threads: cgroup/run_delay.py,
at most `MAX_TASKS` threads read per pod and turn, the rest on the next turns), the share of their runnable
time that was waiting, and on the unified hierarchy where the kernel has PSI the pod's `cpu.pressure` and
`memory.pressure` some totals as seconds stalled per second (from the psi collector's read of the files in the
same visit: one read of each per pod and pass; read here when that collector is off or stood down).

Read on the pod's turn: online pods with their other pod collectors (every `ONLINE_POD_EVERY` passes, every
pass with the run-queue protection on), offline pods every `OFFLINE_EVERY` passes on their own turn (the pods
collector visits them every pass for the 1 s decisions, which need none of this; in between their last
reading stands). Each figure spans the time since the pod's previous reading. The run-queue
protection (agent/enforce/strategies/run_queue_guard.py) steers batch CPU by the online pods' figures.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import register
from agent.snapshot import PodSample, RunQueue, Snapshot
from cgroup.run_delay import RunDelayReader
from common.exposition import LabelShapes
from common.families import Families, Family, FamilyLines, PutLine
from contract.agent_api import json_number

RUN_QUEUE_DELAY = Family(
    "colo_pod_run_queue_delay_seconds_per_second",
    "Seconds the pod's threads waited for a CPU per second, summed over its threads (/proc schedstat).",
)
RUN_QUEUE_WAIT_SHARE = Family(
    "colo_pod_run_queue_wait_ratio", "Share of the pod's threads' runnable time spent waiting for a CPU (0-1)."
)
STALL = Family(
    "colo_pod_stall_seconds_per_second",
    "Seconds per second the pod cgroup had some task stalled on the resource (PSI some total; v2 only).",
    ("resource",),
)
NODE_RUN_QUEUE_DELAY = Family(
    "colo_node_run_queue_delay_seconds_per_second",
    "Run-queue delay of the node's pods summed by class, seconds per second (each pod's latest reading).",
    ("class",),
)


#: passes between two readings of an offline pod (online pods: on their own turn, every pass with the run-queue
#: protection on): the pods collector visits offline pods every pass for the 1 s decisions, which need none of
#: this
OFFLINE_EVERY = 5


@dataclass(slots=True)
class _Last:
    at: float
    cpu_us: int | None
    memory_us: int | None
    turn: int  # the pod's turn among OFFLINE_EVERY passes
    seq: int  # the pass it was read in
    sample: RunQueue | None = None


class RunQueueCollector:
    def __init__(self, deps: CollectorDeps) -> None:
        proc = f"{deps.host_root.rstrip('/')}/proc"
        self.delays = RunDelayReader(deps.layout, deps.reader.files, proc)
        self.reader = deps.reader
        self.psi = deps.layout.unified is not None and "cpu" in deps.psi_resources
        self.is_v2 = deps.layout.is_v2
        self._last: dict[str, _Last] = {}

    def collect(self, ctx: PassContext) -> RunQueue:
        assert ctx.pod is not None and ctx.meta is not None
        pod, now = ctx.pod, ctx.now
        last = self._last.get(pod.path)
        if (
            last is not None
            and last.sample is not None
            and ctx.meta.pod_class == "offline"
            and (ctx.seq + last.turn) % OFFLINE_EVERY
            and ctx.seq - last.seq < OFFLINE_EVERY
        ):
            return last.sample  # not its turn: its last reading stands
        cgroups = (pod.path, *[c.path for c in pod.containers])
        d = self.delays.read(pod.path, cgroups)
        cpu_us = self._some_total_us(ctx, "cpu") if self.psi else None
        memory_us = self._some_total_us(ctx, "memory") if self.psi else None
        if self.psi and cpu_us is None and not self.is_v2:
            self.psi = False  # a hybrid host whose pods have no directory on the unified tree
        turn = zlib.crc32(pod.path.encode()) if last is None else last.turn
        if last is None or now <= last.at:
            sample = RunQueue(None, None, None, None, d.tasks, now)
        else:
            span = now - last.at
            runnable = d.wait_ns + d.run_ns
            sample = RunQueue(
                d.wait_ns / 1e9 / span,
                d.wait_ns / runnable if runnable > 0 else 0.0,
                _rate(last.cpu_us, cpu_us, span),
                _rate(last.memory_us, memory_us, span),
                d.tasks,
                now,
            )
        self._last[pod.path] = _Last(now, cpu_us, memory_us, turn, ctx.seq, sample)
        return sample

    def _some_total_us(self, ctx: PassContext, resource: str) -> int | None:
        """The pod's 'some' PSI total: from the psi collector's read in this visit, else read here."""
        read = ctx.pod_psi
        if resource in read:
            reading = read[resource]
        else:
            assert ctx.pod is not None
            reading = self.reader.psi(ctx.pod.path, resource)
        return None if reading is None else reading.some_total_us

    def forget(self, cgroup: str) -> None:
        self._last.pop(cgroup, None)
        self.delays.forget(cgroup)

    def close(self) -> None:
        self.delays.close()


def _rate(before: int | None, after: int | None, span: float) -> float | None:
    if before is None or after is None or after < before:
        return None
    return (after - before) / 1e6 / span


def _store(sample: PodSample, part: RunQueue) -> None:
    sample.run_queue = part


def _series(put: PutLine, lines: Sequence[FamilyLines], labels: LabelShapes, pod: PodSample) -> None:
    rq = pod.run_queue
    if rq is None:
        return
    delay, share, stall, _node = lines
    put(delay, labels.base, rq.delay)
    put(share, labels.base, rq.wait_share)
    if rq.cpu_some is not None or rq.memory_some is not None:
        tmpl = labels.template(("resource",))
        put(stall, tmpl % "cpu", rq.cpu_some)
        put(stall, tmpl % "memory", rq.memory_some)


def by_class(snap: Snapshot) -> dict[str, float | None]:
    """Run-queue delay of the node's online and offline pods, summed over each pod's latest reading (seconds
    per second); None for a class no pod of which has a reading."""
    sums: dict[str, float | None] = {"online": None, "offline": None}
    for p in snap.pods.values():
        rq = p.run_queue
        if rq is not None and rq.delay is not None:
            key = "offline" if p.meta.pod_class == "offline" else "online"
            sums[key] = (sums[key] or 0.0) + rq.delay
    return sums


def _node_series(f: Families, snap: Snapshot, labels: dict[str, str]) -> None:
    for cls, delay in by_class(snap).items():
        f.add(NODE_RUN_QUEUE_DELAY, {**labels, "class": cls}, delay)


def _fields(pod: PodSample) -> Mapping[str, Any]:
    """What the pod's threads felt since its previous reading (null while the collector has not read it)."""
    rq = pod.run_queue
    if rq is None:
        return {"run_queue": None}
    return {
        "run_queue": {
            "delay_seconds_per_second": json_number(rq.delay),
            "wait_ratio": json_number(rq.wait_share),
            "cpu_stall_seconds_per_second": json_number(rq.cpu_some),
            "memory_stall_seconds_per_second": json_number(rq.memory_some),
            "threads": rq.threads,
        }
    }


register(
    "run_queue",
    True,
    RunQueueCollector,
    store=_store,
    order=52,
    scope="pod",
    families=(RUN_QUEUE_DELAY, RUN_QUEUE_WAIT_SHARE, STALL, NODE_RUN_QUEUE_DELAY),
    node_series=_node_series,
    pod_series=_series,
    pod_fields=_fields,
    units={
        "run_queue.delay_seconds_per_second": "seconds_per_second",
        "run_queue.wait_ratio": "ratio",
        "run_queue.cpu_stall_seconds_per_second": "seconds_per_second",
        "run_queue.memory_stall_seconds_per_second": "seconds_per_second",
        "run_queue.threads": "count",
    },
    example=RunQueue(0.1, 0.05, 0.02, 0.01, 3, 0.0),
    what="Run-queue delay of every pod's threads (/proc schedstat; at most 64 threads read per pod and turn) "
    "and, on cgroup v2 with PSI, its CPU and memory stall totals.",
)
