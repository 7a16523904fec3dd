"""The pod walk of the enforcement pass on a real cgroup v2 kernel (the UML guest): a directory is listed
again only when its link count or its subdirectories say it changed, and every process is found; the hot
counters read through `CounterFiles` as the full readings do."""

from __future__ import annotations

import os

import pytest

from cgroup import CgroupReader
from tests.v2kernel.v2real import SLEEP, V2Tree
from testsupport.waiting import wait_for

pytestmark = pytest.mark.v2kernel


def test_the_walk_follows_the_tree_and_finds_every_process(v2tree: V2Tree) -> None:
    _, pod, (c1, c2) = v2tree.pod("besteffort", containers=2)
    reader = CgroupReader(v2tree.layout)
    root = v2tree.dir(pod)

    def walked() -> list[str]:
        return [d for d, _dirs, _files in os.walk(root)]

    assert reader.tree(pod) == walked()
    os.rmdir(v2tree.dir(c2))  # a container restarts: its cgroup goes, another comes (as many as before)
    c3 = v2tree.mkdir(f"{pod}/{'c' * 64}")
    assert reader.tree(pod) == walked()
    v2tree.mkdir(f"{c1}/nested")  # a directory below a container
    assert reader.tree(pod) == walked()
    proc = v2tree.start(c3, SLEEP)
    wait_for(lambda: proc.pid in reader.procs(c3))
    found = dict(reader.procs_tree(pod))
    assert found[v2tree.dir(c3)] == [proc.pid] and len(found) == len(walked())
    assert reader.procs_recursive(pod) == [proc.pid]  # read again at once: a fresh listing
    second = v2tree.start(c3, SLEEP)
    wait_for(lambda: sorted(reader.procs_recursive(pod)) == sorted([proc.pid, second.pid]))


def test_hot_counters_read_as_the_full_readings(v2tree: V2Tree) -> None:
    _, _, (ctr,) = v2tree.pod("burstable")
    v2tree.start(ctr)
    reader = CgroupReader(v2tree.layout)
    files = reader.counters(ctr)
    usage, periods, throttled, _ = reader.cpu_counters(files)
    full = reader.cpu(ctr)
    assert 0 < usage <= full.usage_ns and periods <= full.nr_periods and throttled <= full.nr_throttled
    assert files.cpu_usage_ns() >= full.usage_ns
    assert files.memory_usage() > 0
    inactive, anon, file = files.memory_stat()
    assert min(inactive, anon, file) >= 0 and reader.memory(ctr).usage_bytes > 0
