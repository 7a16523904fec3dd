"""The cheaper reads of the enforcement and collection passes decide as before: a cgroup tree listed in
`os.walk`'s order (oom_score_adj still read for every process of it each time), the node's CPU
time from /proc/stat as psutil computes it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agent.sense.procfs import HostProc
from cgroup import CgroupReader, CgroupWriter
from testsupport.cgtree import V1Tree
from testsupport.waiting import wait_for

SLEEPER = "import sys\nsys.stdin.read()\n"


def oom_score_adj(pid: int) -> int:
    with open(f"/proc/{pid}/oom_score_adj") as f:
        return int(f.read())


@pytest.mark.cgroupv1
def test_tree_lists_what_os_walk_lists(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (c1, _c2) = tree.pod("burstable", containers=2)
    tree.mkdir(f"{c1}/nested")
    reader = CgroupReader(tree.layout)
    root = tree.layout.dir("cpu", pod)
    walked = [d for d, _dirs, _files in os.walk(root)]
    assert len(walked) == 4
    assert reader.tree(pod) == walked
    assert reader.tree(f"{pod}/absent") == []


@pytest.mark.cgroupv1
def test_oom_score_adj_reaches_new_processes_and_every_known_one(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (c1, c2) = tree.pod("besteffort", containers=2)
    first = tree.start(c1, SLEEPER)
    wait_for(lambda: first.pid in CgroupReader(tree.layout).procs(c1))
    writer = CgroupWriter(tree.layout)
    assert writer.set_oom_score_adj(pod, 1000) == 1
    second = tree.start(c2, SLEEPER)  # started since: written on the next call
    wait_for(lambda: second.pid in CgroupReader(tree.layout).procs(c2))
    assert writer.set_oom_score_adj(pod, 1000) == 1
    assert (oom_score_adj(first.pid), oom_score_adj(second.pid)) == (1000, 1000)
    # without CAP_SYS_RESOURCE Colo's write leaves the process's floor where it was: it may lower its own
    # value again, and the next call puts it back
    with open(f"/proc/{first.pid}/oom_score_adj", "w") as f:
        f.write("500")
    assert writer.set_oom_score_adj(pod, 1000) == 1 and oom_score_adj(first.pid) == 1000


@pytest.fixture
def fake_proc(tmp_path: Path) -> Iterator[Path]:
    saved = psutil.PROCFS_PATH
    (tmp_path / "proc").mkdir()
    yield tmp_path
    psutil.PROCFS_PATH = saved


def test_cpu_times_are_psutils(fake_proc: Path) -> None:
    stat = fake_proc / "proc" / "stat"
    stat.write_text("cpu  652261 17 98952 165327 1029 3 1124 1362 11 5\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1 2 3\n")
    proc = HostProc(str(fake_proc))
    t = psutil.cpu_times()  # pointed at the same file by HostProc
    expected = (
        t.user + t.nice + t.system + t.idle + t.iowait + t.irq + t.softirq + t.steal - t.idle - t.iowait - t.steal
    )
    assert proc.cpu_times().busy_seconds == expected
    assert proc.cpu_count == 1
    stat.write_text("cpu  700000 17 98952 165327 1029 3 1124 1362 11 5\n")  # a new file: the test's, not the kernel's
    assert HostProc(str(fake_proc)).cpu_times().busy_seconds > expected


@pytest.mark.cgroupv1
def test_one_procs_reading_serves_a_tree_once_per_pass(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (c1,) = tree.pod("besteffort", containers=1)
    reader = CgroupReader(tree.layout)
    with reader.one_procs_reading():
        first = reader.procs_tree(pod)
        proc = tree.start(c1, SLEEPER)
        wait_for(lambda: proc.pid in reader.procs(c1))
        assert reader.procs_tree(pod) is first and reader.procs_recursive(pod) == []  # the pass's reading
    assert reader.procs_recursive(pod) == [proc.pid]  # outside a pass: read each time
    gone = f"{pod}/gone"
    assert reader.procs_tree(gone) == [] and reader.procs_recursive(gone) == []
