"""Online QoS on a real cgroup v2 kernel (the UML guest): CFS burst through cpu.max.burst cuts a spiky
container's throttling, and memory.min/low/high land as the decisions say and are put back."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from agent.config_sections.pod_qos import MemoryQosConfig
from cgroup import CgroupReader, CgroupValueError, CgroupWriteError, CgroupWriter, MemoryProtection
from testsupport.qos import Ctr, memory_targets, online_pod, qos_stage, qos_state, section
from testsupport.spiky import PERIOD_US, QUOTA_US, Throttling, run_spikes

# the cgroup v2 tier (a user-mode Linux kernel booted by pytest) lands from branch v2kernel; until it does,
# this module is skipped (checked against that tier merged: 5 passed in the guest)
pytest.importorskip("tests.v2kernel.v2real", reason="the cgroup v2 kernel tier (branch v2kernel) is not merged")
from tests.v2kernel.v2real import V2Tree

pytestmark = pytest.mark.v2kernel
MIB = 1 << 20


def test_burst_lands_in_cpu_max_burst_with_the_kernels_rules(v2tree: V2Tree) -> None:
    _, _, (ctr,) = v2tree.pod("burstable")
    reader, writer = CgroupReader(v2tree.layout), CgroupWriter(v2tree.layout)
    assert reader.supports_cpu_burst(ctr) and reader.cpu_burst(ctr) == 0
    writer.set_cpu_quota(ctr, 50_000)
    writer.set_cpu_burst(ctr, 50_000)
    assert v2tree.read(ctr, "cpu.max.burst") == "50000"
    with pytest.raises(CgroupValueError, match="above the quota"):
        writer.set_cpu_burst(ctr, 50_001)
    with pytest.raises(CgroupWriteError) as exc:  # the kernel's own rule, typed
        writer.set_cpu_quota(ctr, 20_000)
    assert exc.value.errno == errno.EINVAL and v2tree.read(ctr, "cpu.max") == "50000 100000"
    writer.set_cpu_burst(ctr, 10_000)  # a shrinking quota goes after its burst
    writer.set_cpu_quota(ctr, 20_000)
    assert (v2tree.read(ctr, "cpu.max"), v2tree.read(ctr, "cpu.max.burst")) == ("20000 100000", "10000")
    writer.set_cpu_quota(ctr, None)
    writer.set_cpu_burst(ctr, 0)
    assert (v2tree.read(ctr, "cpu.max"), v2tree.read(ctr, "cpu.max.burst")) == ("max 100000", "0")


def test_burst_cuts_throttling_of_150ms_spikes(v2tree_systemd: V2Tree) -> None:
    """The guest has one CPU: the two containers take turns, alternating which goes first."""
    tree = v2tree_systemd
    _, _, (a,) = tree.pod("burstable")
    _, _, (b,) = tree.pod("burstable")
    writer = CgroupWriter(tree.layout)
    for cg in (a, b):
        writer.set_cpu_quota(cg, QUOTA_US, PERIOD_US)
    writer.set_cpu_burst(a, QUOTA_US)
    runs: dict[str, list[Throttling]] = {a: [], b: []}
    for rnd in range(2):
        for cg in (a, b) if rnd == 0 else (b, a):
            runs[cg] += run_spikes(tree, (cg,), count=6).values()
    with_burst, without = runs[a], runs[b]
    periods = (sum(t.nr_throttled for t in with_burst), sum(t.nr_throttled for t in without))
    ms = (sum(t.throttled_ms for t in with_burst), sum(t.throttled_ms for t in without))
    assert periods[1] >= 6, runs  # 150 ms at 50 ms per 100 ms: throttled in about two periods a spike
    # the guest's timers are coarse (its CFS period timer lands late), so burst saves less than on the host:
    # measured 6-10 against 26-30 throttled periods over 12 spikes; a third less is the margin asked
    assert periods[0] * 3 <= periods[1] * 2 and ms[0] * 3 <= ms[1] * 2, runs


def test_memory_qos_lands_and_is_restored(v2tree: V2Tree) -> None:
    _, pod, (c1, c2) = v2tree.pod("burstable", containers=2)
    reader, writer = CgroupReader(v2tree.layout), CgroupWriter(v2tree.layout)
    writer.set_memory_limit(c1, 256 * MIB)
    writer.set_memory_limit(c2, 128 * MIB)
    tier = v2tree.model.tier("burstable")
    cgroups = (c1, c2, pod, tier)
    own = {cg: reader.memory_protection(cg) for cg in cgroups}  # what a ledger records first
    assert own[c1] == MemoryProtection(0, 0, None)
    ctrs = [Ctr(c1, memory=(64 * MIB, 256 * MIB)), Ctr(c2, memory=(32 * MIB, 128 * MIB))]
    spec = online_pod(pod.rsplit("/", 1)[1], pod, ctrs)
    for cfg in (
        MemoryQosConfig(enabled=True, protection="min"),
        MemoryQosConfig(enabled=True, protection="low", high_percent=80),
    ):
        _, targets = memory_targets(cfg, True, [spec], v2tree.model.kubepods())  # the strategy's plan
        for cg in cgroups:
            t = targets[cg]
            writer.set_memory_min(cg, t.min_bytes)
            writer.set_memory_low(cg, t.low_bytes)
            if t.high_bytes is not None:
                writer.set_memory_high(cg, t.high_bytes)
        got = {cg: reader.memory_protection(cg) for cg in cgroups}
        want = {cg: MemoryProtection(t.min_bytes, t.low_bytes, t.high_bytes if t.high_bytes is not None else own[cg].high_bytes)
                for cg, t in targets.items() if cg in cgroups}  # fmt: skip
        assert got == want
    assert reader.memory_protection(c1) == MemoryProtection(0, 64 * MIB, 256 * MIB * 8 // 10 // 4096 * 4096)
    assert reader.memory_protection(tier).low_bytes == 96 * MIB
    for cg, p in own.items():  # put back what was there
        writer.set_memory_min(cg, p.min_bytes)
        writer.set_memory_low(cg, p.low_bytes)
        writer.set_memory_high(cg, p.high_bytes)
    assert {cg: reader.memory_protection(cg) for cg in cgroups} == own


def test_memory_qos_and_burst_through_the_stage_land_and_are_restored(v2tree: V2Tree, tmp_path: Path) -> None:
    """The QoS stage on v2: memory.low (request) and memory.high (80% of the limit) on the containers, the
    pod and every cgroup up to kubepods, cpu.max.burst per container and pod; a pod that turns offline gets
    its values back (and the shared cgroups theirs, no online pod needing them), shutdown puts back the rest."""
    uid, pod, (c1, c2) = v2tree.pod("burstable", containers=2)
    reader, writer = CgroupReader(v2tree.layout), CgroupWriter(v2tree.layout)
    writer.set_memory_limit(c1, 256 * MIB)
    writer.set_memory_limit(c2, 128 * MIB)
    writer.set_cpu_quota(pod, 150_000)
    writer.set_cpu_quota(c1, 50_000)
    writer.set_cpu_quota(c2, 100_000)
    tier, kubepods = v2tree.model.tier("burstable"), v2tree.model.kubepods()
    cgroups = (c1, c2, pod, tier, kubepods)
    own = {cg: reader.memory_protection(cg) for cg in cgroups}
    ctrs = [Ctr(c1, 0.5, memory=(64 * MIB, 256 * MIB)), Ctr(c2, 1.0, memory=(32 * MIB, 128 * MIB))]
    online, offline = online_pod(uid, pod, ctrs), online_pod(uid, pod, ctrs, cls="offline")
    stage = qos_stage(v2tree.layout, v2tree.model, str(tmp_path / "qos.json"), cpu_burst={"enabled": True},
                      memory={"enabled": True, "protection": "low", "high_percent": 80})  # fmt: skip
    stage.on_state(qos_state([online]))
    assert stage.executor.errors == 0, stage.executor.last_error

    def high(limit: int) -> int:
        return limit * 8 // 10 // 4096 * 4096

    got = {cg: reader.memory_protection(cg) for cg in cgroups}
    assert got[c1] == MemoryProtection(0, 64 * MIB, high(256 * MIB))
    assert got[c2] == MemoryProtection(0, 32 * MIB, high(128 * MIB))
    assert got[pod] == MemoryProtection(0, 96 * MIB, high(384 * MIB))
    for shared in (tier, kubepods):  # protection only: memory.high of the tiers is left alone
        assert got[shared] == MemoryProtection(own[shared].min_bytes, 96 * MIB, own[shared].high_bytes)
    assert [v2tree.read(cg, "cpu.max.burst") for cg in (c1, c2, pod)] == ["50000", "100000", "150000"]
    assert section(stage)["memory"]["pods"][uid] == {"protected_bytes": 96 * MIB, "high_bytes": high(384 * MIB)}
    stage.on_state(qos_state([offline]))
    assert {cg: reader.memory_protection(cg) for cg in cgroups} == own
    assert [v2tree.read(cg, "cpu.max.burst") for cg in (c1, c2, pod)] == ["0", "0", "0"]
    stage.on_state(qos_state([online]))
    assert reader.memory_protection(kubepods).low_bytes == 96 * MIB
    stage.stop()
    assert {cg: reader.memory_protection(cg) for cg in cgroups} == own
    assert [v2tree.read(cg, "cpu.max.burst") for cg in (c1, c2, pod)] == ["0", "0", "0"]
    assert stage.ledger.entries == {} and stage.ledger.shared == {}


def test_a_pod_changing_class_under_the_full_registry_keeps_one_memory_high_original(
    v2tree: V2Tree, tmp_path: Path
) -> None:
    """Every strategy registered: offline enforcement's memory.high and online memory QoS share the pod's
    memory.high. Turning offline, the pod keeps offline enforcement's value (memory QoS puts back only its
    other files); online again, memory QoS's; shutdown puts back what was there before either wrote it."""
    uid, pod, (c1, c2) = v2tree.pod("burstable", containers=2)
    reader, writer = CgroupReader(v2tree.layout), CgroupWriter(v2tree.layout)
    writer.set_memory_limit(c1, 256 * MIB)
    writer.set_memory_limit(c2, 128 * MIB)
    cgroups = (c1, c2, pod, v2tree.model.tier("burstable"), v2tree.model.kubepods())
    own = {cg: reader.memory_protection(cg) for cg in cgroups}
    ctrs = [Ctr(c1, 0.5, memory=(64 * MIB, 256 * MIB)), Ctr(c2, 1.0, memory=(32 * MIB, 128 * MIB))]
    online, offline = online_pod(uid, pod, ctrs), online_pod(uid, pod, ctrs, cls="offline")
    stage = qos_stage(v2tree.layout, v2tree.model, str(tmp_path / "qos.json"), every=True,
                      memory={"enabled": True, "protection": "low", "high_percent": 80})  # fmt: skip
    assert {"memory_high", "memory_qos"} <= {s.name for s in stage.strategies}
    stage.on_state(qos_state([online]))
    qos_high = reader.memory_protection(pod).high_bytes
    assert qos_high == 384 * MIB * 8 // 10 // 4096 * 4096, stage.executor.last_error
    for _ in range(2):
        stage.on_state(qos_state([offline]))
        got = reader.memory_protection(pod)
        assert "memory_high" in stage.ledger.entries[uid].parts and got.high_bytes not in (
            qos_high,
            own[pod].high_bytes,
        )
        assert (got.min_bytes, got.low_bytes) == (own[pod].min_bytes, own[pod].low_bytes)
        assert reader.memory_protection(c1) == own[c1]
    stage.on_state(qos_state([online]))
    assert reader.memory_protection(pod).high_bytes == qos_high
    stage.stop()
    assert {cg: reader.memory_protection(cg) for cg in cgroups} == own
    assert stage.executor.errors == 0, stage.executor.last_error
