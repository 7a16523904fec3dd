"""The run-queue delay reader on a real cgroup v2 kernel (the UML guest: one CPU, no PSI): a pod's threads
listed from `cgroup.threads`, two burners on one CPU wait for it, a sleeper does not; no PSI, no stall figure."""

from __future__ import annotations

import time

import pytest

from cgroup import CgroupReader, FileCache
from cgroup.run_delay import RunDelayReader
from tests.v2kernel.v2real import SLEEP, V2Tree
from testsupport.waiting import wait_for

pytestmark = pytest.mark.v2kernel


def test_threads_on_one_cpu_wait_and_a_sleeper_does_not(v2tree: V2Tree) -> None:
    _, busy, (ctr,) = v2tree.pod("burstable")
    _, idle, (sleeper,) = v2tree.pod("besteffort")
    v2tree.start(ctr)
    v2tree.start(ctr)  # two runnable threads, one CPU: one of them always waits
    v2tree.start(sleeper, SLEEP)
    reader = RunDelayReader(v2tree.layout, FileCache())
    wait_for(lambda: len(reader.tasks([busy, ctr])) == 2)
    reader.read(busy, [busy, ctr])
    reader.read(idle, [idle, sleeper])
    time.sleep(0.5)
    d = reader.read(busy, [busy, ctr])
    assert d.tasks == 2 and d.run_ns > 0 and d.wait_ns > 0
    quiet = reader.read(idle, [idle, sleeper])
    assert quiet.tasks == 1 and quiet.wait_ns < d.wait_ns
    assert CgroupReader(v2tree.layout).psi(busy, "cpu") is None  # the guest has no PSI
    reader.close()
