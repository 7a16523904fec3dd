"""cgroup/ on a real cgroup v2 kernel (the UML guest): layout and driver detection, discovery, readers and
every writer with the kernel's own answers, for both kubelet drivers."""

from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from cgroup import (
    CgroupGone,
    CgroupReader,
    CgroupWriter,
    detect_driver,
    detect_layout,
    discover_pods,
    parse_container_id,
    resolve_pod,
)
from cgroup.errors import CgroupFileMissing, CgroupValueError, CgroupWriteError
from tests.v2kernel.v2real import SLEEP, V2Tree
from testsupport.k8sobjects import container_id_of
from testsupport.waiting import wait_for

pytestmark = pytest.mark.v2kernel
MIB = 1 << 20


def test_layout_is_pure_v2_and_the_driver_comes_from_the_tree(v2tree: V2Tree) -> None:
    v2tree.pod("burstable")
    layout = detect_layout("/")
    assert layout.mode == "v2" and layout.is_v2 and layout.v1 == {}
    assert layout.unified is not None and layout.unified.path == "/sys/fs/cgroup"
    decision = detect_driver(layout, host_root="/", argv=[])
    assert decision.driver == v2tree.driver and "filesystem" in decision.rule


def test_discovery_finds_pods_and_containers_of_every_tier(v2tree: V2Tree) -> None:
    made = {qos: v2tree.pod(qos, containers=2) for qos in ("guaranteed", "burstable", "besteffort")}  # type: ignore[arg-type]
    v2tree.mkdir(f"{made['burstable'][1]}/not-a-container")  # kubelet never makes one; discovery ignores it
    pods = {p.uid: p for p in discover_pods(v2tree.layout, v2tree.model)}
    assert set(pods) == {uid for uid, _, _ in made.values()}
    for qos, (uid, path, ctrs) in made.items():
        assert (pods[uid].qos, pods[uid].path) == (qos, path)
        assert sorted(c.path for c in pods[uid].containers) == sorted(ctrs)
        ids = [parse_container_id(container_id_of(c)) for c in ctrs]
        resolved = resolve_pod(v2tree.layout, v2tree.model, uid, None, ids)
        assert resolved is not None and resolved.path == path and resolved.qos == qos


def _rate(tree: V2Tree, cgroup: str, seconds: float) -> tuple[float, float, int, int]:
    """(cores over wall time, cores over the cgroup's own CFS periods, Δperiods, Δthrottled) from the reader."""
    reader = CgroupReader(tree.layout)
    a, t0 = reader.cpu(cgroup), time.monotonic()
    time.sleep(seconds)
    b, t1 = reader.cpu(cgroup), time.monotonic()
    periods = b.nr_periods - a.nr_periods
    used = (b.usage_ns - a.usage_ns) / 1e9
    return used / (t1 - t0), used / max(periods * 0.1, 1e-9), periods, b.nr_throttled - a.nr_throttled


def test_cpu_rate_and_throttling_of_a_limited_burner(v2tree: V2Tree) -> None:
    """The guest's one CPU belongs to the burner alone, but the host may be busy: the rate is checked
    against the CFS periods the kernel ran (a starved guest runs fewer), and over wall time only from above."""
    _, _, (ctr,) = v2tree.pod("burstable")
    v2tree.write(ctr, "cpu.max", "30000 100000")
    v2tree.start(ctr)
    wait_for(lambda: CgroupReader(v2tree.layout).cpu(ctr).nr_throttled > 2)
    wall, per_period, periods, throttled = _rate(v2tree, ctr, 3.0)
    assert per_period == pytest.approx(0.30, abs=0.03)
    assert wall <= 0.33
    assert periods >= 10 and throttled >= periods * 0.8  # it wanted more every period
    reader = CgroupReader(v2tree.layout)
    raw, got = v2tree.stat(ctr), reader.cpu(ctr)
    assert got.throttled_ns >= raw["throttled_usec"] * 1000 and got.usage_ns >= raw["usage_usec"] * 1000


def test_working_set_of_a_held_allocation(v2tree: V2Tree) -> None:
    _, pod, (ctr,) = v2tree.pod("burstable")
    reader = CgroupReader(v2tree.layout)
    before = reader.memory(ctr)
    v2tree.allocate(ctr, 64)
    for cg in (ctr, pod):
        mem = reader.memory(cg)
        assert 64 * MIB <= mem.usage_bytes - before.usage_bytes <= 80 * MIB
        assert mem.anon_bytes >= 64 * MIB and mem.working_set_bytes >= 64 * MIB
        assert mem.usage_bytes == int(v2tree.read(cg, "memory.current"))


def test_every_writer_lands_in_the_kernel(v2tree: V2Tree) -> None:
    _, pod, (ctr,) = v2tree.pod("burstable")
    w, reader = CgroupWriter(v2tree.layout), CgroupReader(v2tree.layout)
    w.set_cpu_quota(ctr, 25_000, 50_000)
    assert v2tree.read(ctr, "cpu.max") == "25000 50000"
    s = reader.cpu_settings(ctr)
    assert (s.quota_us, s.period_us, s.shares) == (25_000, 50_000, None)
    w.set_cpu_quota(ctr, None)
    assert v2tree.read(ctr, "cpu.max") == "max 100000"
    w.set_cpu_shares(pod, 1024)  # kubelet's 1-core request, as weight: v2 has no shares
    assert v2tree.read(pod, "cpu.weight") == "39" and reader.cpu_settings(pod).weight == 39
    w.set_cpu_weight(pod, 1)
    assert v2tree.read(pod, "cpu.weight") == "1"
    assert w.set_cpu_idle(pod, True) and v2tree.read(pod, "cpu.idle") == "1"
    assert reader.cpu_settings(pod).idle is True
    w.set_cpu_idle(pod, False)
    w.set_memory_high(pod, 100 * MIB)
    assert v2tree.read(pod, "memory.high") == str(100 * MIB) and reader.memory_high(pod) == 100 * MIB
    w.set_memory_high(pod, None)
    assert v2tree.read(pod, "memory.high") == "max" and reader.memory_high(pod) is None
    w.set_memory_limit(ctr, 256 * MIB)
    assert reader.memory_limit(ctr) == 256 * MIB
    w.set_memory_limit(ctr, None)
    assert v2tree.read(ctr, "memory.max") == "max"


def test_oom_score_adj_and_kill_reach_every_process(v2tree: V2Tree) -> None:
    _, pod, ctrs = v2tree.pod("besteffort", containers=2)
    procs = [v2tree.start(c, SLEEP) for c in ctrs]
    reader, w = CgroupReader(v2tree.layout), CgroupWriter(v2tree.layout)
    wait_for(lambda: len(reader.procs_recursive(pod)) == 2)
    assert w.set_oom_score_adj(pod, 1000) == 2
    for p in procs:
        with open(f"/proc/{p.pid}/oom_score_adj") as f:
            assert f.read().strip() == "1000"
    assert w.set_oom_score_adj(pod, 1000) == 0  # already there: nothing written
    assert w.kill_all(pod, signal.SIGKILL) == 2
    assert [p.wait(10) for p in procs] == [-signal.SIGKILL] * 2


def test_the_kernels_own_rejections_arrive_typed(v2tree: V2Tree) -> None:
    _, pod, (ctr,) = v2tree.pod("burstable")
    w = CgroupWriter(v2tree.layout)
    # the kernel's largest quota is 2^44 - 1 µs; Colo's own check lets 2^44 through, the kernel says EINVAL
    with pytest.raises(CgroupWriteError) as exc:
        w.set_cpu_quota(ctr, 1 << 44)
    assert exc.value.errno == errno.EINVAL and "cpu.max" in str(exc.value)
    # a quota below the burst the runtime allowed: EINVAL, and the old value stays
    v2tree.write(ctr, "cpu.max", "50000 100000")
    v2tree.write(ctr, "cpu.max.burst", "40000")
    with pytest.raises(CgroupWriteError) as exc:
        w.set_cpu_quota(ctr, 20_000)
    assert exc.value.errno == errno.EINVAL and v2tree.read(ctr, "cpu.max") == "50000 100000"
    # the guest has no cpuset controller: its file is missing, typed
    with pytest.raises(CgroupFileMissing):
        w.set_cpuset(pod, {0})
    # the root cgroup has no cpu.idle: reported, not raised
    assert w.set_cpu_idle("/", True) is False
    # a hard limit below what the cgroup holds would OOM-kill on v2: Colo refuses before the kernel
    v2tree.allocate(ctr, 32)
    with pytest.raises(CgroupValueError):
        w.set_memory_limit(ctr, 8 * MIB)
    assert v2tree.read(ctr, "memory.max") == "max"


def test_a_removed_cgroup_reads_as_gone(v2tree: V2Tree) -> None:
    _, _, (ctr,) = v2tree.pod("burstable")
    reader = CgroupReader(v2tree.layout)
    reader.cpu(ctr)  # descriptors now open
    os.rmdir(v2tree.dir(ctr))
    with pytest.raises(CgroupGone):
        reader.cpu(ctr)
    with pytest.raises(CgroupGone):
        reader.memory(ctr)


def test_v2_lets_a_child_hold_more_quota_than_its_parent(v2tree: V2Tree) -> None:
    """v1 refuses a child quota above its parent's (EINVAL); v2 accepts it and the parent's still binds."""
    _, pod, (ctr,) = v2tree.pod("burstable")
    w = CgroupWriter(v2tree.layout)
    w.set_cpu_quota(pod, 20_000)
    w.set_cpu_quota(ctr, 80_000)
    assert (v2tree.read(pod, "cpu.max"), v2tree.read(ctr, "cpu.max")) == ("20000 100000", "80000 100000")
    v2tree.start(ctr)
    wait_for(lambda: CgroupReader(v2tree.layout).cpu(pod).nr_throttled > 2)
    _, per_period, _, _ = _rate(v2tree, pod, 2.0)
    assert per_period == pytest.approx(0.20, abs=0.03)


def test_weights_split_the_cpu_and_sched_idle_yields_it(v2tree: V2Tree) -> None:
    """v2 has weights (1..10000), not shares: Colo's minimum weight 1 against kubelet's 1-core 39, then
    SCHED_IDLE, measured as shares of one window on the guest's one CPU."""
    _, light, (light_ctr,) = v2tree.pod("burstable")
    _, heavy, (heavy_ctr,) = v2tree.pod("burstable")
    w = CgroupWriter(v2tree.layout)
    w.set_cpu_shares(heavy, 1024)
    w.set_cpu_shares(light, 2)
    assert (v2tree.read(heavy, "cpu.weight"), v2tree.read(light, "cpu.weight")) == ("39", "1")
    v2tree.start(light_ctr)
    v2tree.start(heavy_ctr)

    def split(seconds: float) -> float:
        a = usage_pair()
        time.sleep(seconds)
        b = usage_pair()
        return (b[0] - a[0]) / max(b[0] - a[0] + b[1] - a[1], 1)

    def usage_pair() -> tuple[int, int]:
        return v2tree.stat(light)["usage_usec"], v2tree.stat(heavy)["usage_usec"]

    assert split(2.0) <= 0.08  # 1 / 40 by weight, with a margin for the tick
    assert w.set_cpu_idle(light, True)
    assert split(2.0) <= 0.05  # SCHED_IDLE: the smallest weight the scheduler has
    # an idle group reads weight 0 (outside the 1..10000 anyone may write; the enforcer's ledger takes
    # kubelet's weight from the spec then), and clearing cpu.idle resets the weight to the default 100, not
    # to what it was: whoever clears it must write the weight afterwards (Colo's restore does, see
    # test_v2_enforcement)
    assert CgroupReader(v2tree.layout).cpu_settings(light).weight == 0
    w.set_cpu_idle(light, False)
    assert v2tree.read(light, "cpu.weight") == "100"
