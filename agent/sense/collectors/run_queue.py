"""The `run_queue` collector (pod scope): what each pod's threads felt, online and offline alike — seconds they
waited on a run queue per second (/proc/<tid>/schedstat summed over the pod's threads: cgroup/run_delay.py,
at most `MAX_TASKS` threads read per pod and turn, the rest on the next turns), the share of their runnable
time that was waiting, and on the unified hierarchy where the kernel has PSI the pod's `cpu.pressure` and
`memory.pressure` some totals as seconds stalled per second.

Read on the pod's turn like its other pod collectors (offline pods every pass, online pods every
`ONLINE_POD_EVERY` passes): each figure spans the time since the pod's previous reading. The run-queue
protection (agent/enforce/strategies/run_queue_guard.py) steers batch CPU by the online pods' figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import register
from agent.snapshot import RunQueue
from cgroup.run_delay import RunDelayReader
from common.families import Family

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


@dataclass(slots=True)
class _Last:
    at: float
    cpu_us: int | None
    memory_us: int | None


class RunQueueCollector:
    def __init__(self, deps: CollectorDeps) -> None:
        proc = f"{deps.host_root.rstrip('/')}/proc"
        self.delays = RunDelayReader(deps.layout, deps.reader.files, proc)
        self.psi = deps.layout.unified is not None and "cpu" in deps.psi_resources
        self.is_v2 = deps.layout.is_v2
        self._last: dict[str, _Last] = {}

    def collect(self, ctx: PassContext) -> RunQueue:
        assert ctx.pod is not None
        pod, now = ctx.pod, ctx.now
        cgroups = (pod.path, *[c.path for c in pod.containers])
        d = self.delays.read(pod.path, cgroups)
        cpu_us = self.delays.pressure_total_us(pod.path, "cpu") if self.psi else None
        memory_us = self.delays.pressure_total_us(pod.path, "memory") if self.psi else None
        if self.psi and cpu_us is None and not self.is_v2:
            self.psi = False  # a hybrid host whose pods have no directory on the unified tree
        last = self._last.get(pod.path)
        self._last[pod.path] = _Last(now, cpu_us, memory_us)
        if last is None or now <= last.at:
            return RunQueue(None, None, None, None, d.tasks, now)
        span = now - last.at
        runnable = d.wait_ns + d.run_ns
        return RunQueue(
            d.wait_ns / 1e9 / span,
            d.wait_ns / runnable if runnable > 0 else 0.0,
            _rate(last.cpu_us, cpu_us, span),
            _rate(last.memory_us, memory_us, span),
            d.tasks,
            now,
        )

    def forget(self, cgroup: str) -> None:
        self._last.pop(cgroup, None)
        self.delays.forget(cgroup)

    def close(self) -> None:
        self.delays.close()


def _rate(before: int | None, after: int | None, span: float) -> float | None:
    if before is None or after is None or after < before:
        return None
    return (after - before) / 1e6 / span


register(
    "run_queue",
    True,
    RunQueueCollector,
    fills="run_queue",
    order=52,
    scope="pod",
    what="Run-queue delay of every pod's threads (/proc schedstat; at most 64 threads read per pod and turn) "
    "and, on cgroup v2 with PSI, its CPU and memory stall totals.",
)
