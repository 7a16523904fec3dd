"""The run-queue delay reader (cgroup/run_delay.py) on real processes in real v1 cgroups, its bound on the
threads read per turn, the PSI totals on kernel-format v2 files, and the run_queue collector in a pass."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from agent.sense.collectors.run_queue import OFFLINE_EVERY
from agent.sense.sampler import Sampler
from agent.windows.store import WindowStore
from cgroup import CgroupGone, CgroupParseError, CgroupReader, FileCache, PathModel, PsiReading
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
    assert reader.psi("/kubepods/podx", "cpu") == PsiReading((1.0, 1.0), 123456)
    assert reader.psi("/kubepods/podx", "memory") == PsiReading((0.0, 0.0), 42)


def test_a_pressure_read_keeps_the_readers_rules(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path))
    tree.put("/kubepods/podx", V2Cgroup())
    reader = CgroupReader(tree.layout)
    pressure = Path(tree.dir("/kubepods/podx")) / "io.pressure"
    pressure.write_text("some avg10=x avg60=0.00 avg300=0.00 total=7\n")
    assert reader.psi("/kubepods/podx", "io") == PsiReading(None, 7)  # a figure that does not parse is None
    pressure.write_text("nonsense\n")
    assert reader.psi("/kubepods/podx", "io") == PsiReading(None, None)  # unparsable: no figure, no failure
    # (a fresh reader for each of the rest: a kept descriptor still reads a removed file of a temp dir)
    pressure.unlink()  # a kernel without PSI for it
    assert CgroupReader(tree.layout).psi("/kubepods/podx", "io") is None
    shutil.rmtree(tree.dir("/kubepods/podx"))  # the cgroup vanished
    with pytest.raises(CgroupGone):
        CgroupReader(tree.layout).psi("/kubepods/podx", "cpu")


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


class CountingFiles(FileCache):
    """The reader's file cache, counting its reads of each file (the reads themselves are the real ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    def read(self, path: str) -> bytes:
        self.reads[path] = self.reads.get(path, 0) + 1
        return super().read(path)


def test_a_pass_reads_each_pods_pressure_files_once_on_v2(tmp_path: Path) -> None:
    """The psi collector's read of a pod's cpu.pressure and memory.pressure gives the run_queue collector its
    totals too: one read of each per pod and pass, the online pod's on every visit and the offline pod's on the
    run_queue collector's turns alike, and both figures come from it."""
    tree = V2Tree(str(tmp_path))
    model = PathModel("systemd")
    tree.put(model.tier("burstable"), V2Cgroup())
    states = {
        model.pod("burstable", uid): V2Cgroup(cpu_pressure=(12.5, 1.0, 0.5, 1_000_000), memory_pressure=(3.0, 0, 0, 5))
        for uid in ("0a0b0c0d-1111-2222-3333-444455556666", "0a0b0c0d-1111-2222-3333-777788889999")
    }
    for pod, state in states.items():
        tree.put(pod, state)
    files = CountingFiles()
    source = ClassedPodSource(tree.layout, model, lambda i, _: "offline" if i == 1 else "online")
    sampler = Sampler(tree.layout, model, source, WindowStore(), reader=CgroupReader(tree.layout, files))
    if "cpu" not in sampler.psi_resources or "memory" not in sampler.psi_resources:
        pytest.skip("this kernel has no PSI: the collectors read no pressure files")
    try:
        sampler.sample()  # first sight (the cache's first read of a file opens it, then reads)
        before = dict(files.reads)
        for pod, state in states.items():
            state.cpu_pressure = (12.5, 1.0, 0.5, 2_000_000)  # 1 s stalled since the first pass
            tree.put(pod, state)
        passes = 2 * OFFLINE_EVERY
        for _ in range(passes):
            snap = sampler.sample()
        for pod in states:
            for name in ("cpu.pressure", "memory.pressure"):
                path = f"{tree.dir(pod)}/{name}"
                assert files.reads[path] - before[path] == passes, name
        for p in snap.pods.values():
            assert p.pressure["cpu"].some_avg10 == pytest.approx(0.125)  # the avg10 of the one read ...
            rq = p.run_queue
            assert rq is not None and rq.memory_some == 0.0  # ... and its totals (memory's did not move)
        online = next(p for p in snap.pods.values() if p.meta.pod_class == "online")
        assert online.run_queue is not None and online.run_queue.cpu_some == 0.0  # read every pass: moved once
    finally:
        sampler.close()
