"""The run-queue delay reader (cgroup/run_delay.py) on real processes in real v1 cgroups, its bound on the
threads read per turn, the PSI totals on kernel-format v2 files, and the run_queue collector in a pass."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agent.sense.collectors.run_queue import OFFLINE_EVERY
from agent.sense.sampler import Sampler
from agent.windows.store import WindowStore
from cgroup import CgroupParseError, CgroupReader, FileCache
from cgroup.files import parse_psi_some_total
from cgroup.run_delay import RunDelayReader, parse_schedstat
from testsupport.cgtree import V1Tree
from testsupport.classed_pods import ClassedPodSource
from testsupport.v2tree import V2Cgroup, V2Tree
from testsupport.waiting import wait_for

SLEEP = "import sys\nsys.stdin.read()\n"
THREADS = (  # argv[1] more threads, all asleep, until stdin closes
    "import sys, threading\nstop = threading.Event()\n"
    "for _ in range(int(sys.argv[1])):\n    threading.Thread(target=stop.wait, daemon=True).start()\n"
    "sys.stdin.read()\n"
)


def test_schedstat_and_pressure_formats() -> None:
    assert parse_schedstat(b"189335120 10325446 386\n") == (189335120, 10325446)
    text = b"some avg10=1.53 avg60=1.89 avg300=0.91 total=4542933\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    assert parse_psi_some_total("p", text) == 4542933
    with pytest.raises(CgroupParseError):
        parse_psi_some_total("p", b"garbage\n")


@pytest.mark.cgroupv1
def test_more_runnable_threads_than_cpus_wait_and_a_sleeper_does_not(v1tree: V1Tree) -> None:
    _, busy, (c1, c2) = v1tree.pod("burstable", containers=2)
    _, idle, (c3,) = v1tree.pod("besteffort")
    burners = (os.cpu_count() or 1) + 1  # more runnable threads than CPUs: one of them always waits
    for i in range(burners):
        v1tree.start(c1 if i % 2 else c2)
    v1tree.start(c3, SLEEP)
    reader = RunDelayReader(v1tree.layout, FileCache())
    wait_for(lambda: len(reader.tasks([busy, c1, c2])) == burners)
    first = reader.read(busy, [busy, c1, c2])
    assert (first.wait_ns, first.run_ns, first.tasks, first.read) == (0, 0, burners, burners)  # no history yet
    reader.read(idle, [idle, c3])
    time.sleep(0.5)
    d = reader.read(busy, [busy, c1, c2])
    assert d.run_ns > 0 and d.wait_ns > 0 and d.read == burners
    quiet = reader.read(idle, [idle, c3])
    assert quiet.tasks == 1 and quiet.wait_ns < d.wait_ns
    reader.close()


@pytest.mark.cgroupv1
def test_a_pod_with_many_threads_is_read_a_bounded_slice_per_turn(v1tree: V1Tree) -> None:
    _, pod, (ctr,) = v1tree.pod("burstable")
    proc = v1tree.start(ctr, THREADS, "9")  # 10 threads
    reader = RunDelayReader(v1tree.layout, FileCache(), max_tasks=4, relist_every=100)
    wait_for(lambda: len(reader.tasks([pod, ctr])) == 10, what=f"10 threads, {reader.tasks([pod, ctr])}")
    slices = [reader.read(pod, [pod, ctr]) for _ in range(3)]
    assert [(s.tasks, s.read) for s in slices] == [(10, 4)] * 3
    assert len(reader._fds) == 10  # three turns of four: every thread visited, one descriptor each
    proc.kill()
    proc.wait()
    wait_for(lambda: not reader.tasks([pod, ctr]))
    reader.read(pod, [pod, ctr])  # finds its threads gone ...
    gone = reader.read(pod, [pod, ctr])  # ... and lists them again
    assert (gone.tasks, gone.read) == (0, 0) and not reader._fds  # exited threads' descriptors closed
    reader.close()


@pytest.mark.cgroupv1
def test_forgetting_a_pod_closes_its_descriptors(v1tree: V1Tree) -> None:
    _, pod, (ctr,) = v1tree.pod("burstable")
    v1tree.start(ctr, SLEEP)
    reader = RunDelayReader(v1tree.layout, FileCache())
    wait_for(lambda: reader.read(pod, [pod, ctr]).read == 1)
    assert len(reader._fds) == 1
    reader.forget(pod)
    assert not reader._fds


def test_pressure_totals_on_v2(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path))
    tree.put("/kubepods/podx", V2Cgroup(cpu_pressure=(1.0, 1.0, 1.0, 123456), memory_pressure=(0, 0, 0, 42)))
    reader = CgroupReader(tree.layout)
    assert reader.psi_some_total_us("/kubepods/podx", "cpu") == 123456
    assert reader.psi_some_total_us("/kubepods/podx", "memory") == 42
    (Path(tree.dir("/kubepods/podx")) / "io.pressure").write_text("nonsense\n")
    assert reader.psi_some_total_us("/kubepods/podx", "io") is None  # unparsable: no figure, no failure


@pytest.mark.cgroupv1
def test_the_collector_reads_online_pods_on_their_visits_and_offline_pods_on_their_own_turn(v1tree: V1Tree) -> None:
    _, _, (on,) = v1tree.pod("burstable")
    _, _, (off,) = v1tree.pod("besteffort")
    v1tree.start(on)
    v1tree.start(off)
    source = ClassedPodSource(v1tree.layout, v1tree.model, lambda i, _: "offline" if i == 1 else "online")
    sampler = Sampler(v1tree.layout, v1tree.model, source, WindowStore())  # online pods visited every pass
    readings: dict[str, list[float]] = {"online": [], "offline": []}
    try:
        first = sampler.sample()
        assert all(p.run_queue is not None and p.run_queue.delay is None for p in first.pods.values())
        for _ in range(2 * OFFLINE_EVERY):
            time.sleep(0.02)
            for p in sampler.sample().pods.values():
                rq = p.run_queue
                assert rq is not None and rq.threads == 1
                readings[p.meta.pod_class].append(rq.at)
                if rq.delay is not None:
                    assert rq.wait_share is not None and 0.0 <= rq.wait_share <= 1.0
        assert len(set(readings["online"])) == 2 * OFFLINE_EVERY  # a fresh reading every visit
        read_first = {p.run_queue.at for p in first.pods.values() if p.run_queue is not None}
        assert len(set(readings["offline"]) - read_first) == 2  # on its own turn: twice in 2 x OFFLINE_EVERY passes
    finally:
        sampler.close()
