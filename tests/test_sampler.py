"""The sampling pass on real cgroups: rates from the kernel's counters, first samples, resets, vanished pods."""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path

import pytest

from agent.sense.netstats import InterfaceCounters, NetCounters
from agent.sense.rates import CounterRates
from agent.sense.sampler import CgroupPodSource, Sampler
from agent.windows.store import WindowStore
from cgroup import CgroupWriter, PathModel
from testsupport.cgtree import V1Tree


def test_counter_rates_rules() -> None:
    r = CounterRates()
    assert r.rate("a", 100.0, 10.0) is None  # first sample: no rate
    assert r.rate("a", 150.0, 11.0) == 50.0
    assert r.rate("a", 160.0, 13.0) == 5.0  # a late tick divides by the real elapsed time
    assert r.rate("a", 10.0, 14.0) is None  # went backwards: reset, no negative rate
    assert r.rate("a", 30.0, 15.0) == 20.0  # and restarts from the new value
    assert r.rate("a", 40.0, 15.0) is None  # no time passed
    assert len(r) == 1


def make_sampler(tree: V1Tree) -> tuple[Sampler, WindowStore]:
    windows = WindowStore()
    source = CgroupPodSource(tree.layout, tree.model, rescan_seconds=0.0)
    return Sampler(tree.layout, tree.model, source, windows), windows


def kernel_counted_rss(tree: V1Tree, cgroup: str, at_least: int) -> None:
    """Wait until the kernel's memory.stat of `cgroup` shows `at_least` bytes of rss: its per-CPU counters reach
    memory.stat only when flushed (every 2 s, or sooner past a threshold), so an allocation just made can show
    in part (seen once under load: 25 of 32 MiB). Waits on the kernel, asserts nothing of time."""
    path = f"{tree.layout.dir('memory', cgroup)}/memory.stat"
    for _ in range(200):
        with open(path) as f:
            stat = dict(line.split() for line in f)
        if int(stat["total_rss"]) >= at_least:
            return
        time.sleep(0.05)


@pytest.mark.cgroupv1
def test_pass_measures_pods_containers_and_node(v1tree: V1Tree) -> None:
    uid, pod, (c1, c2) = v1tree.pod("burstable", containers=2)
    idle_uid, _, _ = v1tree.pod("besteffort")
    CgroupWriter(v1tree.layout).set_cpu_quota(c1, 30_000)
    v1tree.start(c1)
    v1tree.allocate(c2, 32)
    kernel_counted_rss(v1tree, pod, 30 << 20)
    sampler, windows = make_sampler(v1tree)
    first = sampler.sample()
    assert set(first.pods) == {uid, idle_uid}
    assert first.pods[uid].cpu_cores is None and first.node.cpu_cores is None  # no rate from one sample
    time.sleep(1.5)
    snap = sampler.sample()
    p = snap.pods[uid]
    assert p.qos == "burstable" and p.cgroup == pod
    # the 0.3-core quota bounds the rate from above; other load on the machine may starve it below that
    assert p.cpu_cores is not None and 0 < p.cpu_cores <= 0.36
    assert p.cpu_throttled_ratio == 0.0  # the quota is on the container, not the pod
    by_id = {c.id: c for c in p.containers}
    assert len(by_id) == 2
    burner = by_id[c1.rsplit("/", 1)[1].removeprefix("cri-containerd-").removesuffix(".scope")]
    assert burner.cpu_throttled_ratio is not None and 0 <= burner.cpu_throttled_ratio <= 1
    assert burner.cpu_cores is not None and 0 < burner.cpu_cores <= p.cpu_cores + 0.01
    assert p.memory_working_set_bytes >= 32 << 20 and p.memory_anon_bytes >= 30 << 20
    assert snap.node.cpu_cores is not None and snap.node.cpu_cores >= p.cpu_cores * 0.9  # the node holds the pod
    assert 0 < snap.node.memory_usage_ratio < 1
    tier = snap.tiers["burstable"].cpu_cores
    assert tier is not None and tier >= p.cpu_cores * 0.9  # the tier holds the pod, from the same pass
    assert windows.get(("pod", uid, "cpu")) is not None and windows.get(("node", "", "cpu")) is not None
    assert snap.seq == 2 and snap.duration_seconds > 0


@pytest.mark.cgroupv1
def test_vanished_pod_leaves_windows_and_descriptors(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, pod, (ctr,) = tree.pod("burstable")
    tree.start(ctr)
    sampler, windows = make_sampler(tree)
    sampler.sample()
    time.sleep(0.2)
    sampler.sample()
    assert windows.get(("pod", uid, "cpu")) is not None
    held = len(sampler.reader.files)
    tree.remove(pod)
    snap = sampler.sample()
    assert uid not in snap.pods
    sampler.sample()
    assert windows.get(("pod", uid, "cpu")) is None and windows.get(("pod", uid, "memory")) is None
    assert len(sampler.reader.files) < held
    assert not [p for p in sampler.reader.files._fds if uid in p]  # no descriptor of the pod is left


@pytest.mark.cgroupv1
def test_recreated_cgroup_gives_no_negative_rate(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, pod, (ctr,) = tree.pod("burstable")
    tree.start(ctr)
    sampler, _ = make_sampler(tree)
    sampler.sample()
    time.sleep(0.5)
    assert (sampler.sample().pods[uid].cpu_cores or 0) > 0
    # the pod's cgroup is recreated under the same path (kubelet restarted it): its counter starts at 0
    tree.remove(pod)
    tree.mkdir(pod)
    tree.mkdir(ctr)
    snap = sampler.sample()  # the old descriptors answer ENODEV: reported gone, handles dropped
    assert uid not in snap.pods
    snap = sampler.sample()  # found again, a new counter: no rate yet, never a negative one
    assert uid in snap.pods and snap.pods[uid].cpu_cores is None
    time.sleep(0.2)
    again = sampler.sample().pods[uid].cpu_cores
    assert again is not None and again >= 0


@pytest.mark.cgroupv1
def test_container_memory_detail_every_n_passes(v1tree_cgroupfs: V1Tree) -> None:
    """Between full readings a container's working set follows its usage; the detail refreshes every N passes."""
    tree = v1tree_cgroupfs
    uid, _, (ctr,) = tree.pod("burstable")
    windows = WindowStore()
    sampler = Sampler(tree.layout, tree.model, CgroupPodSource(tree.layout, tree.model, 0.0), windows,
                      container_stat_every=3)  # fmt: skip
    sampler.sample()  # first sight: always a full reading
    tree.allocate(ctr, 48)
    anon_seen = []
    for _ in range(3):
        (c,) = sampler.sample().pods[uid].containers
        assert c.memory_working_set_bytes >= 48 << 20  # usage is read every pass
        anon_seen.append(c.memory_anon_bytes >= 46 << 20)
    # its turn comes when (seq + crc32(path)) % 3 == 0: anon catches up exactly then, not before
    turn = next(i for i in range(3) if (1 + i + zlib.crc32(ctr.encode())) % 3 == 0)
    assert anon_seen == [i >= turn for i in range(3)]
    # the pod: its usage every pass, its detail on its own turn (within the next 3 passes)
    assert any(sampler.sample().pods[uid].memory_anon_bytes >= 46 << 20 for _ in range(3))


@pytest.mark.cgroupv1
def test_the_pods_memory_limit_is_read_on_its_turn(v1tree_cgroupfs: V1Tree) -> None:
    """kubelet's pod limit (overhead and sidecars included) as the cgroup holds it: read at first sight and
    then on the pod's turn every N passes, like container details (a resize is rare)."""
    tree = v1tree_cgroupfs
    uid, pod_cg, _ = tree.pod("burstable")
    writer = CgroupWriter(tree.layout)
    writer.set_memory_limit(pod_cg, 300 << 20)
    sampler = Sampler(tree.layout, tree.model, CgroupPodSource(tree.layout, tree.model, 0.0), WindowStore(),
                      container_stat_every=3)  # fmt: skip
    assert sampler.sample().pods[uid].memory_limit_bytes == 300 << 20
    writer.set_memory_limit(pod_cg, None)
    seen = [sampler.sample().pods[uid].memory_limit_bytes for _ in range(3)]
    turn = next(i for i in range(3) if (1 + i + zlib.crc32(pod_cg.encode())) % 3 == 0)
    assert seen == [None if i >= turn else 300 << 20 for i in range(3)]


@pytest.mark.cgroupv1
def test_guaranteed_tier_is_kubepods_without_the_other_tiers(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, _, (ctr,) = tree.pod("burstable")
    tree.pod("guaranteed")
    CgroupWriter(tree.layout).set_cpu_quota(ctr, 30_000)
    tree.start(ctr)
    sampler, _ = make_sampler(tree)
    sampler.sample()
    time.sleep(1.0)
    tiers = sampler.sample().tiers
    assert tiers["burstable"].cpu_cores is not None and tiers["burstable"].cpu_cores > 0
    assert tiers["guaranteed"].cpu_cores is not None and tiers["guaranteed"].cpu_cores < 0.1  # not counted twice


@pytest.mark.cgroupv1
def test_restored_series_of_pods_gone_meanwhile_are_swept(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, _, _ = tree.pod("burstable")
    sampler, windows = make_sampler(tree)
    windows.add(("pod", "ended-while-down", "cpu"), 1.0, 0.5)  # as if loaded from the state file
    sampler.sample()
    assert windows.get(("pod", "ended-while-down", "cpu")) is None
    assert windows.get(("pod", uid, "memory")) is not None


@pytest.mark.cgroupv1
def test_pod_pressure_on_a_hybrid_host_from_the_unified_tree(v1tree: V1Tree) -> None:
    """On hybrid systemd hosts the pod slices exist on the unified tree too: PSI is read there, for real."""
    tree = v1tree
    unified = tree.layout.unified
    if unified is None or not os.path.exists(f"{unified.path}/cpu.pressure"):
        pytest.skip("no unified hierarchy with PSI on this host")
    uid, pod_path, _ = tree.pod("burstable")
    made = []
    for part in range(1, len(pod_path.strip("/").split("/")) + 1):
        d = unified.path + "/" + "/".join(pod_path.strip("/").split("/")[:part])
        if not os.path.isdir(d):
            os.mkdir(d)
            made.append(d)
    try:
        sampler, _ = make_sampler(tree)
        snap = sampler.sample()
        pressure = snap.pods[uid].pressure
        assert set(pressure) == set(sampler.psi_resources) and pressure["cpu"].some_avg10 >= 0.0
        for d in reversed(made):
            os.rmdir(d)
        made.clear()
        assert sampler.sample().pods[uid].pressure == {}  # its unified directory went away: no PSI, no error
    finally:
        for d in reversed(made):
            os.rmdir(d)


def test_a_pass_on_cgroup_v2(tmp_path: Path) -> None:
    """The same pass on a kernel-format v2 tree: usage_usec, memory.current/stat, PSI from the pod's files."""
    from testsupport.v2tree import V2Cgroup, V2Tree

    t = V2Tree(str(tmp_path))
    model = PathModel("systemd")
    uid = "0a0b0c0d-1111-2222-3333-444455556666"
    pod = model.pod("burstable", uid)
    state = V2Cgroup(usage_usec=1_000_000, memory_current=100 << 20,
                     memory_stat={"anon": 60 << 20, "file": 40 << 20, "inactive_file": 30 << 20},
                     cpu_pressure=(12.5, 1.0, 0.5, 10), memory_pressure=(3.0, 0.0, 0.0, 5))  # fmt: skip
    t.put(model.tier("burstable"), V2Cgroup())
    t.put(pod, state)
    sampler = Sampler(t.layout, model, CgroupPodSource(t.layout, model, 0.0), WindowStore())
    before = time.monotonic()
    sampler.sample()
    state.usage_usec += 500_000  # 0.5 s of CPU over at least a second, at most the time both passes took
    t.put(pod, state)
    time.sleep(1.0)
    p = sampler.sample().pods[uid]
    spent = time.monotonic() - before
    assert p.cpu_cores is not None and 0.5 / spent <= p.cpu_cores <= 0.5
    assert p.memory_working_set_bytes == 70 << 20 and p.memory_anon_bytes == 60 << 20
    if "cpu" in sampler.psi_resources:
        assert p.pressure["cpu"].some_avg10 == pytest.approx(0.125)


def test_network_counters_of_physical_interfaces_from_sysfs(tmp_path: Path) -> None:
    """Only interfaces backed by a device count; counters are re-read through the kept descriptors, and an
    interface that disappears is dropped, never an error."""
    net = tmp_path / "sys" / "class" / "net"
    for name, physical, rx, tx in (("eth0", True, 1000, 10), ("veth1", False, 5, 5), ("lo", False, 7, 7)):
        stats = net / name / "statistics"
        stats.mkdir(parents=True)
        if physical:
            (net / name / "device").mkdir()
        (stats / "rx_bytes").write_text(f"{rx}\n")
        (stats / "tx_bytes").write_text(f"{tx}\n")
    counters = NetCounters(str(tmp_path))
    assert counters.read(0.0) == [InterfaceCounters("eth0", 1000, 10)]
    (net / "eth0" / "statistics" / "rx_bytes").write_text("2500\n")
    assert counters.read(1.0) == [InterfaceCounters("eth0", 2500, 10)]
    counters.close()
    (net / "eth0" / "statistics" / "rx_bytes").unlink()
    assert counters.read(2.0) == []


@pytest.mark.cgroupv1
def test_collectors_report_success_and_duration_and_can_be_switched_off(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, _, (ctr,) = tree.pod("burstable")
    windows = WindowStore()
    source = CgroupPodSource(tree.layout, tree.model, 0.0)
    sampler = Sampler(tree.layout, tree.model, source, windows)
    try:
        snap = sampler.sample()
        runs = {r.name: r for r in snap.collectors}
        assert set(runs) == {"node", "tiers", "pods", "containers", "psi", "run_queue", "network"}  # the defaults
        assert all(r.success and r.duration_seconds >= 0 for r in runs.values())
        assert sum(r.duration_seconds for r in runs.values()) <= snap.duration_seconds
        assert [c.cgroup for p in snap.pods.values() for c in p.containers] == [ctr]
    finally:
        sampler.close()
    off = Sampler(tree.layout, tree.model, source, windows, collectors=frozenset({"node", "pods"}))
    try:
        snap = off.sample()
        assert {r.name for r in snap.collectors} == {"node", "pods"}
        assert snap.tiers == {} and snap.interfaces == ()
        assert [p.containers for p in snap.pods.values()] == [()]
        assert [p.run_queue for p in snap.pods.values()] == [None]
    finally:
        off.close()


def test_the_collectors_configuration_keeps_node_and_pods() -> None:
    from agent.config import AgentConfig

    cfg = AgentConfig.model_validate({"collectors": {"containers": False, "network": False}})
    assert cfg.collectors.enabled() == frozenset({"node", "pods", "tiers", "psi", "run_queue"})
