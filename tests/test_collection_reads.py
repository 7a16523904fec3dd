"""The collection pass's slots decide what is read as before: a pod whose containers are all between turns
gets the very samples of its last reading, and a container that vanished is skipped and forgotten."""

from __future__ import annotations

import time
import zlib

import pytest

from agent.sense.sampler import CgroupPodSource, Sampler
from agent.windows.store import WindowStore
from testsupport.cgtree import V1Tree


@pytest.mark.cgroupv1
def test_a_pods_containers_stand_until_the_next_one_is_due(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, _, ctrs = tree.pod("burstable", containers=3)
    every = 4
    sampler = Sampler(tree.layout, tree.model, CgroupPodSource(tree.layout, tree.model, 1e9), WindowStore(),
                      container_every=every)  # fmt: skip
    try:
        last = sampler.sample().pods[uid].containers  # first sight: all read
        for seq in range(1, 13):
            now = sampler.sample().pods[uid].containers
            due = {c for c in ctrs if (seq + zlib.crc32(c.encode())) % every == 0}
            if due:
                assert now is not last
                changed = {n.cgroup for n, o in zip(now, last, strict=True) if n is not o}
                assert changed == due  # exactly the containers on their turn were read
            else:
                assert now is last  # nothing due: the same tuple, nothing read
            last = now
    finally:
        sampler.close()


@pytest.mark.cgroupv1
def test_a_vanished_container_is_skipped_and_forgotten(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, _, (kept, gone) = tree.pod("burstable", containers=2)
    sampler = Sampler(tree.layout, tree.model, CgroupPodSource(tree.layout, tree.model, 1e9), WindowStore())
    try:
        assert {c.cgroup for c in sampler.sample().pods[uid].containers} == {kept, gone}
        tree.remove(gone)  # the source still lists it (it rescans only now and then)
        snap = sampler.sample()
        assert [c.cgroup for c in snap.pods[uid].containers] == [kept]
        assert not [p for p in sampler.reader.files.fds if gone.rsplit("/", 1)[1] in p]  # no descriptor kept
        assert [c.cgroup for c in sampler.sample().pods[uid].containers] == [kept]
    finally:
        sampler.close()


@pytest.mark.cgroupv1
def test_a_pods_throttling_is_read_at_the_containers_pace(v1tree_cgroupfs: V1Tree) -> None:
    """Only /metrics shows a pod's throttled ratio: it is read every max(container_every, detail) passes on the
    pod's turn, its usage every pass."""
    from cgroup import CgroupWriter

    tree = v1tree_cgroupfs
    uid, pod, (ctr,) = tree.pod("burstable")
    CgroupWriter(tree.layout).set_cpu_quota(pod, 1_000)  # the smallest quota: throttled whenever it runs 1 ms
    tree.start(ctr)
    every = 4
    sampler = Sampler(tree.layout, tree.model, CgroupPodSource(tree.layout, tree.model, 1e9), WindowStore(),
                      container_every=every, container_stat_every=2)  # fmt: skip
    try:
        last = sampler.sample().pods[uid]
        ratios = []
        for seq in range(1, 13):
            time.sleep(0.05)
            now = sampler.sample().pods[uid]
            if (seq + zlib.crc32(pod.encode())) % every:
                assert now.cpu_throttled_ratio == last.cpu_throttled_ratio  # stands between its readings
            assert now.cpu_cores is not None  # usage every pass
            ratios.append(now.cpu_throttled_ratio or 0.0)
            last = now
        # some reading saw throttling (one interval alone can hold no run of the burner on a loaded machine)
        assert max(ratios) > 0
    finally:
        sampler.close()
