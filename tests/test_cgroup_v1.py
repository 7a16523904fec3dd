"""cgroup v1 for real: a kubepods-like tree under this machine's mounted controllers, real processes."""

from __future__ import annotations

import errno
import os
import time

import pytest

from cgroup import (
    CgroupGone,
    CgroupReader,
    CgroupValueError,
    CgroupWriteError,
    CgroupWriter,
    LimitChange,
    Unsupported,
    apply_in_safe_order,
    discover_pods,
    parse_container_id,
    resolve_pod,
)
from testsupport.cgtree import V1Tree, assert_quota_binds

pytestmark = pytest.mark.cgroupv1

MIB = 1 << 20


def test_discovery_finds_every_pod_and_container(v1tree: V1Tree) -> None:
    made = {}
    for qos, n in (("guaranteed", 1), ("burstable", 3), ("besteffort", 2)):
        uid, path, containers = v1tree.pod(qos, containers=n)  # type: ignore[arg-type]
        made[uid] = (qos, path, containers)
    pods = {p.uid: p for p in discover_pods(v1tree.layout, v1tree.model)}
    assert set(pods) == set(made)
    for uid, (qos, path, containers) in made.items():
        assert pods[uid].qos == qos
        assert pods[uid].path == path
        assert sorted(c.path for c in pods[uid].containers) == sorted(containers)
        if v1tree.driver == "systemd":
            assert all(c.runtime == "containerd" for c in pods[uid].containers)


def test_resolve_pod_from_api_fields(v1tree: V1Tree) -> None:
    uid, path, containers = v1tree.pod("burstable", containers=2)
    ids = [parse_container_id("containerd://" + c.rsplit("/", 1)[1].removeprefix("cri-containerd-")[:64])
           for c in containers]  # fmt: skip
    pod = resolve_pod(v1tree.layout, v1tree.model, uid, "burstable", ids)
    assert pod is not None and pod.path == path
    assert sorted(c.path for c in pod.containers) == sorted(containers)
    # unknown QoS: every tier is searched
    assert resolve_pod(v1tree.layout, v1tree.model, uid, None, ids) == pod
    assert resolve_pod(v1tree.layout, v1tree.model, "no-such-uid", None, ids) is None


def test_quota_20_percent_reads_0_20_cores(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (ctr,) = tree.pod("burstable")
    reader, writer = CgroupReader(tree.layout), CgroupWriter(tree.layout)
    writer.set_cpu_quota(ctr, 20_000, 100_000)
    tree.start(ctr)
    time.sleep(0.3)
    assert_quota_binds(reader, ctr, 0.20, 3.0)  # 0.20 cores per period, however busy the machine is
    # the pod's counter includes its container's
    assert reader.cpu(pod).usage_ns >= reader.cpu(ctr).usage_ns
    stat = reader.cpu(ctr)
    assert stat.nr_periods > 0 and stat.nr_throttled > 0 and stat.throttled_ns > 0
    settings = reader.cpu_settings(ctr)
    assert (settings.quota_us, settings.period_us) == (20_000, 100_000)

    # loosen to 50%: the burner may use more per period
    writer.set_cpu_quota(ctr, 50_000, 100_000)
    time.sleep(0.2)
    assert_quota_binds(reader, ctr, 0.50, 2.0)
    # a new period keeps the ratio's meaning
    writer.set_cpu_quota(ctr, 10_000, 50_000)
    assert reader.cpu_settings(ctr).period_us == 50_000
    time.sleep(0.2)
    assert_quota_binds(reader, ctr, 0.20, 2.0, period_us=50_000)
    writer.set_cpu_quota(ctr, None)
    assert reader.cpu_settings(ctr).quota_us is None


def test_memory_allocation_shows_in_usage_and_working_set(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (ctr,) = tree.pod("burstable")
    reader = CgroupReader(tree.layout)
    before = reader.memory(ctr)
    tree.allocate(ctr, 64)
    after = reader.memory(ctr)
    assert after.usage_bytes - before.usage_bytes >= 64 * MIB
    assert after.working_set_bytes >= 64 * MIB
    assert after.anon_bytes >= 60 * MIB
    assert after.working_set_bytes == max(0, after.usage_bytes - after.inactive_file_bytes)
    assert reader.memory(pod).usage_bytes >= after.usage_bytes


def test_writes_take_effect(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (ctr,) = tree.pod("besteffort")
    reader, writer = CgroupReader(tree.layout), CgroupWriter(tree.layout)
    writer.set_cpu_shares(pod, 2)
    assert reader.cpu_settings(pod).shares == 2
    writer.set_cpu_weight(pod, 100)  # v1: converted to shares
    assert reader.cpu_settings(pod).shares == 2 + (99 * 262142) // 9999
    assert writer.set_cpu_idle(pod, True) is (os.path.exists(f"{tree.layout.dir('cpu', pod)}/cpu.idle"))
    writer.set_cpuset(ctr, {0})
    assert reader.cpuset(ctr) == frozenset({0})
    writer.set_memory_limit(ctr, 256 * MIB)
    assert reader.memory_limit(ctr) == 256 * MIB
    writer.set_memory_limit(ctr, None)
    assert reader.memory_limit(ctr) is None
    with pytest.raises(Unsupported):
        writer.set_memory_high(ctr, 128 * MIB)


def test_rejected_writes_raise_typed_errors_and_keep_the_old_value(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, _, (ctr,) = tree.pod("burstable")
    reader, writer = CgroupReader(tree.layout), CgroupWriter(tree.layout)
    writer.set_cpu_quota(ctr, 50_000)
    with pytest.raises(CgroupValueError):
        writer.set_cpu_quota(ctr, 10)  # under the kernel's 1 ms minimum: refused before writing
    with pytest.raises(CgroupValueError):
        writer.set_cpu_shares(ctr, 1)
    assert reader.cpu_settings(ctr).quota_us == 50_000
    with pytest.raises(CgroupWriteError) as info:
        writer.set_cpuset(ctr, {4096})  # no such CPU
    assert info.value.errno in (errno.EINVAL, errno.ERANGE) and info.value.path.endswith("cpuset.cpus")
    assert reader.cpuset(ctr) == reader.cpuset("/")

    tree.allocate(ctr, 64)
    writer.set_memory_limit(ctr, 512 * MIB)
    with pytest.raises(CgroupValueError) as value_info:
        writer.set_memory_limit(ctr, 8 * MIB)  # below usage: refused before the kernel reclaims or OOM-kills
    assert "8388608" in str(value_info.value) and "usage" in str(value_info.value)
    assert reader.memory_limit(ctr) == 512 * MIB
    # the kernel's own refusal arrives typed too: a v1 parent quota below its child's is EINVAL
    _, parent, (child,) = tree.pod("burstable")
    writer.set_cpu_quota(parent, 50_000, 50_000)
    writer.set_cpu_quota(child, 40_000, 100_000)
    with pytest.raises(CgroupWriteError) as write_info:
        writer.set_cpu_quota(parent, 10_000, 100_000)  # a new period and a quota under the child's
    assert write_info.value.errno == errno.EINVAL
    # the failed period change rolled back: still 50000 per 50000, not unlimited
    s = reader.cpu_settings(parent)
    assert (s.quota_us, s.period_us) == (50_000, 50_000)


def test_safe_order_for_nested_quotas(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (ctr,) = tree.pod("burstable")
    reader, writer = CgroupReader(tree.layout), CgroupWriter(tree.layout)
    writer.set_cpu_quota(pod, 50_000)
    writer.set_cpu_quota(ctr, 40_000)
    # v1 refuses a child quota above its parent's: the naive order (parent first) fails when tightening
    with pytest.raises(CgroupWriteError):
        writer.set_cpu_quota(pod, 20_000)
    apply_in_safe_order(
        [
            LimitChange(pod, False, lambda: writer.set_cpu_quota(pod, 20_000)),
            LimitChange(ctr, False, lambda: writer.set_cpu_quota(ctr, 10_000)),
        ]
    )
    assert (reader.cpu_settings(pod).quota_us, reader.cpu_settings(ctr).quota_us) == (20_000, 10_000)
    apply_in_safe_order(
        [
            LimitChange(ctr, True, lambda: writer.set_cpu_quota(ctr, 80_000)),
            LimitChange(pod, True, lambda: writer.set_cpu_quota(pod, 100_000)),
        ]
    )
    assert (reader.cpu_settings(pod).quota_us, reader.cpu_settings(ctr).quota_us) == (100_000, 80_000)


def test_oom_score_adj_for_every_task(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (c1, c2) = tree.pod("besteffort", containers=2)
    procs = [tree.start(c1), tree.start(c2)]
    writer = CgroupWriter(tree.layout)
    assert writer.set_oom_score_adj(pod, 1000) == 2
    for p in procs:
        with open(f"/proc/{p.pid}/oom_score_adj") as f:
            assert f.read().strip() == "1000"
    assert writer.set_oom_score_adj(pod, 1000) == 0  # idempotent: nothing to change
    with pytest.raises(CgroupValueError):
        writer.set_oom_score_adj(pod, 1001)


def test_removed_cgroup_reads_as_gone(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (ctr,) = tree.pod("burstable")
    tree.start(ctr)
    reader = CgroupReader(tree.layout)
    reader.cpu(ctr)
    reader.memory(ctr)
    held = len(reader.files)
    assert held >= 4
    tree.remove(pod)
    with pytest.raises(CgroupGone):
        reader.cpu(ctr)
    with pytest.raises(CgroupGone):
        reader.memory(ctr)
    assert len(reader.files) < held  # the vanished cgroup's descriptors were dropped
    reader.forget(ctr)
    assert len(reader.files) == 0
