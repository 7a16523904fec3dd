"""CFS burst and memory protection files: the real v1 kernel here, kernel-format v2 trees."""

from __future__ import annotations

import errno

import pytest

from cgroup import (
    CgroupFileMissing,
    CgroupReader,
    CgroupValueError,
    CgroupWriteError,
    CgroupWriter,
    MemoryProtection,
    PathModel,
    Unsupported,
    parse_container_id,
)
from testsupport.cgtree import V1Tree
from testsupport.v2tree import V2Cgroup, V2Tree

MIB = 1 << 20


@pytest.mark.cgroupv1
def test_v1_burst_lands_and_kernel_rules_are_typed(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (ctr,) = tree.pod("burstable")
    reader, writer = CgroupReader(tree.layout), CgroupWriter(tree.layout)
    assert reader.supports_cpu_burst(ctr)  # this machine's kernel (6.x) has cpu.cfs_burst_us
    assert reader.cpu_burst(ctr) == 0
    writer.set_cpu_quota(pod, 100_000)
    writer.set_cpu_quota(ctr, 50_000)
    writer.set_cpu_burst(ctr, 50_000)
    assert reader.cpu_burst(ctr) == 50_000
    # validation refuses what the kernel would: a burst above the quota, negative, not an integer
    for bad in (50_001, -1, True):
        with pytest.raises(CgroupValueError):
            writer.set_cpu_burst(ctr, bad)
    assert reader.cpu_burst(ctr) == 50_000
    # the kernel itself refuses a quota below the burst: typed, nothing changed
    with pytest.raises(CgroupWriteError) as info:
        writer.set_cpu_quota(ctr, 20_000)
    assert info.value.errno == errno.EINVAL
    assert reader.cpu_settings(ctr).quota_us == 50_000
    # an unlimited cgroup may hold any burst under the kernel's maximum
    writer.set_cpu_quota(ctr, None)
    writer.set_cpu_burst(ctr, 200_000)
    assert reader.cpu_burst(ctr) == 200_000


@pytest.mark.cgroupv1
def test_v1_memory_protection_is_unsupported(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, _, (ctr,) = tree.pod("burstable")
    reader, writer = CgroupReader(tree.layout), CgroupWriter(tree.layout)
    for setter in (writer.set_memory_min, writer.set_memory_low):
        with pytest.raises(Unsupported, match="cgroup v2"):
            setter(ctr, MIB)
    with pytest.raises(Unsupported):
        reader.memory_protection(ctr)


@pytest.fixture
def v2(tmp_path: object) -> tuple[V2Tree, str]:
    t = V2Tree(str(tmp_path))
    model = PathModel("systemd")
    t.put(model.tier("burstable"), V2Cgroup())
    uid = "1a2b3c4d-0000-1111-2222-333344445555"
    t.put(model.pod("burstable", uid), V2Cgroup())
    ctr = model.container("burstable", uid, parse_container_id("containerd://" + "ab" * 32))
    t.put(ctr, V2Cgroup(cpu_max=(50_000, 100_000), memory_max=512 * MIB, memory_high=400 * MIB))
    return t, ctr


def test_v2_burst_in_kernel_format(v2: tuple[V2Tree, str]) -> None:
    t, ctr = v2
    reader, writer = CgroupReader(t.layout), CgroupWriter(t.layout)
    assert reader.supports_cpu_burst(ctr) and reader.cpu_burst(ctr) == 0
    writer.set_cpu_burst(ctr, 50_000)
    assert t.read(ctr, "cpu.max.burst") == b"50000"
    with pytest.raises(CgroupValueError, match="above the quota"):
        writer.set_cpu_burst(ctr, 60_000)


def test_v2_kernel_without_burst_is_unsupported(v2: tuple[V2Tree, str]) -> None:
    import os

    t, ctr = v2
    os.remove(os.path.join(t.dir(ctr), "cpu.max.burst"))  # a kernel before 5.14
    reader, writer = CgroupReader(t.layout), CgroupWriter(t.layout)
    assert not reader.supports_cpu_burst(ctr)
    with pytest.raises(Unsupported, match=r"5\.14"):
        reader.cpu_burst(ctr)
    with pytest.raises(Unsupported, match=r"5\.14"):
        writer.set_cpu_burst(ctr, 1000)
    writer.set_cpu_quota(ctr, 30_000)  # the quota alone still goes
    assert t.read(ctr, "cpu.max") == b"30000 100000"
    os.remove(os.path.join(t.dir(ctr), "cpu.max"))  # no cpu controller here at all: not the kernel's lack
    with pytest.raises(CgroupFileMissing, match="cpu controller"):
        reader.cpu_burst(ctr)


def test_v2_memory_protection(v2: tuple[V2Tree, str]) -> None:
    t, ctr = v2
    reader, writer = CgroupReader(t.layout), CgroupWriter(t.layout)
    assert reader.memory_protection(ctr) == MemoryProtection(0, 0, 400 * MIB)
    writer.set_memory_min(ctr, 128 * MIB)
    writer.set_memory_low(ctr, 256 * MIB)
    assert t.read(ctr, "memory.min") == b"134217728" and t.read(ctr, "memory.low") == b"268435456"
    assert reader.memory_protection(ctr) == MemoryProtection(128 * MIB, 256 * MIB, 400 * MIB)
    writer.set_memory_low(ctr, 0)
    assert reader.memory_protection(ctr).low_bytes == 0
    with pytest.raises(CgroupValueError, match="hard limit"):
        writer.set_memory_min(ctr, 513 * MIB)
    with pytest.raises(CgroupValueError):
        writer.set_memory_low(ctr, -1)
    assert t.read(ctr, "memory.min") == b"134217728"
