"""A spiky online container on the real kernel: 150 ms CPU spikes under a 0.5-CPU limit, with and without
CFS burst, measured from the kernel's own throttling counters (shared by the tests and bench/)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cgroup import CgroupReader, CgroupWriter, Layout
from testsupport.cgtree import V1Tree

QUOTA_US, PERIOD_US = 50_000, 100_000  # 0.5 CPU

# spikes of SPIKE_MS of this thread's CPU time (not wall time: a busy machine stretches a spike, never
# shrinks it), one every EVERY_MS of wall time, COUNT of them. It says "ready" once started and waits for a
# line, says "done" after the spikes and waits for stdin to close: the interpreter's own start and exit
# (slow under user-mode Linux) stay out of the measurement.
SPIKY = """import sys, time
spike, every, count = float(sys.argv[1]) / 1000, float(sys.argv[2]) / 1000, int(sys.argv[3])
sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.readline()
start = time.monotonic()
for i in range(count):
    delay = start + i * every - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    t0 = time.thread_time()
    while time.thread_time() - t0 < spike:
        pass
sys.stdout.write("done\\n"); sys.stdout.flush(); sys.stdin.read()
"""


def spike_in(procs: Sequence[subprocess.Popen[bytes]]) -> Callable[[], None]:
    """Wait until every spiky process started; return what lets them all go and waits until they are done
    (their counters are read around it)."""
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"

    def go() -> None:
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.flush()
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == b"done\n"

    return go


def finish(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(30)


class SpikeTree(Protocol):
    """A test tree that starts processes in its cgroups: the v1 tree here, the v2 one in the UML guest."""

    @property
    def layout(self) -> Layout: ...

    def start(self, cgroup: str, code: str = ..., *args: str) -> subprocess.Popen[bytes]: ...


@dataclass(frozen=True, slots=True)
class Throttling:
    nr_periods: int
    nr_throttled: int
    throttled_ms: float
    cpu_ms: float


def make_spiky_pair(tree: V1Tree) -> tuple[str, str]:
    """Two 0.5-CPU containers, one pod each (pod quota = container quota).

    The test tree's root gets the highest CPU weight, as an online pod has on its node: on a shared machine
    whose other work would hold a spike under 0.5 CPU, the spike would never reach its quota at all."""
    writer = CgroupWriter(tree.layout)
    tree.mkdir(tree.cgroup_root)
    writer.set_cpu_shares(tree.cgroup_root, 262144)
    out = []
    for _ in range(2):
        _, pod, (ctr,) = tree.pod("burstable")
        writer.set_cpu_quota(pod, QUOTA_US, PERIOD_US)
        writer.set_cpu_quota(ctr, QUOTA_US, PERIOD_US)
        out.append(ctr)
    return out[0], out[1]


def run_spikes(
    tree: SpikeTree, cgroups: tuple[str, ...], spike_ms: int = 150, every_ms: int = 600, count: int = 5
) -> dict[str, Throttling]:
    """Start the spiky program in every cgroup at once (same windows, same machine noise), wait for all,
    return each cgroup's throttling over the run from cpu.stat and cpuacct.usage deltas."""
    reader = CgroupReader(tree.layout)
    procs = [tree.start(cg, SPIKY, str(spike_ms), str(every_ms), str(count)) for cg in cgroups]
    go = spike_in(procs)
    before = {cg: reader.cpu(cg) for cg in cgroups}
    go()
    after = {cg: reader.cpu(cg) for cg in cgroups}
    finish(procs)
    out = {}
    for cg in cgroups:
        a, b = before[cg], after[cg]
        out[cg] = Throttling(
            b.nr_periods - a.nr_periods,
            b.nr_throttled - a.nr_throttled,
            (b.throttled_ns - a.throttled_ns) / 1e6,
            (b.usage_ns - a.usage_ns) / 1e6,
        )
    return out
